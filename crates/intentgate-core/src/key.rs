//! Intent-key templates: one key per business intent, never per attempt.
//!
//! A template such as `refund:{order_id}:{amount:.2}` is rendered from the validated
//! arguments, so every retry of one intent, from any layer, renders the same key. A
//! template may refer only to the tool's arguments and to `{intent_id}` (an id the
//! application creates once per intent); anything else could change between attempts and
//! is refused when the tool is loaded.
//!
//! Syntax ([`crate::placeholder`], shared with request templates): literal text with
//! placeholders `{name}`, `{a.b}` (a field of an object argument) or `{name:.N}` (an exact
//! decimal with N places). `{{` and `}}` are literal braces. A key refuses the minor-units
//! format (`{amount:minor(USD)}`): that is how a provider wants an amount sent, and a key
//! names the amount as the intent does (`{amount:.2}`, with `{currency}` when the currency
//! varies); minor units of a currency taken from an argument would give 49.00 USD and 4,900
//! JPY one key. Rendered values are percent-encoded where they could be confused with the
//! template's own separators, so `{a}:{b}` can't render the same key for `a="x:y", b="z"`
//! and `a="x", b="y:z"`.
//!
//! A placeholder of a sensitive argument (`sensitive: true` in the input schema, marked on
//! the template with [`KeyTemplate::mark_sensitive`]) renders a keyed hash of the text it
//! would have rendered ([`HashKey::key_part`]): the decimal rules still apply first, so
//! `49`, `49.0` and `"49.00"` under `{amount:.2}` hash alike, and the clear value never
//! reaches the ledger's key column or the provider.

use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use serde_json::Value;

use crate::decimal::DecimalError;
use crate::limits::{INTENT_ID_LENGTH_MAX, INTENT_KEY_LENGTH_MAX};
use crate::placeholder::{self, Format, Piece, Placeholder, Steps, SyntaxError, ValueError};
use crate::sensitive::{ArgumentPath, HashKey, KEY_HASH_HEX_LENGTH};
use crate::text;

/// The placeholder that refers to the application's intent id.
pub const INTENT_ID_PLACEHOLDER: &str = "intent_id";

/// Argument names that usually hold a value minted per attempt. A key built from one of
/// them changes on every retry, which is the bug this product exists to prevent.
pub const PER_ATTEMPT_NAMES: &[&str] = &[
    "tool_call_id",
    "toolcallid",
    "call_id",
    "callid",
    "request_id",
    "requestid",
    "attempt",
    "attempt_id",
    "attempt_number",
    "retry",
    "retry_count",
    "try",
    "timestamp",
    "time",
    "now",
    "created_at",
    "nonce",
    "uuid",
    "guid",
    "random",
    "trace_id",
    "span_id",
    "message_id",
    "run_id",
    "turn_id",
    "idempotency_key",
];

/// True when an argument name suggests a value that changes per attempt.
pub fn looks_per_attempt(name: &str) -> bool {
    let lower = name.to_ascii_lowercase();
    PER_ATTEMPT_NAMES
        .iter()
        .any(|suspect| lower == *suspect || lower.ends_with(&format!("_{suspect}")))
}

/// A parsed key template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTemplate {
    source: String,
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Field {
        path: Vec<String>,
        places: Option<u32>,
        /// The argument is sensitive: the key holds a keyed hash of the rendered text.
        sensitive: bool,
    },
    IntentId,
}

/// Why a template can't be used, or why it can't be rendered for some arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("key template `{template}`: {reason} at character {position}")]
    Syntax {
        template: String,
        position: usize,
        reason: &'static str,
    },
    #[error(
        "key template `{0}` has no placeholder, so every call would be one intent; build it from the \
         arguments that identify the intent, e.g. refund:{{order_id}}:{{amount:.2}}"
    )]
    Constant(String),
    #[error(
        "key template refers to `{name}`, which is not an argument of the tool; a key may use only \
         the tool's arguments and {{intent_id}}, so that every attempt of one intent gets the same key"
    )]
    NotAnArgument { name: String },
    #[error(
        "key template uses `{name}`, which looks like a value that changes on every attempt (a tool \
         call id, request id, timestamp or nonce); build the key from the business intent, e.g. \
         refund:{{order_id}}:{{amount:.2}}, or from {{intent_id}} created once by the application"
    )]
    PerAttempt { name: String },
    #[error("the key needs argument `{0}`, which the call did not provide")]
    MissingArgument(String),
    #[error(
        "this tool's key uses {{intent_id}}: the calling application must pass an intent id \
         (HTTP header Intent-Id, MCP _meta \"intentgate/intent_id\") created once per intent"
    )]
    MissingIntentId,
    #[error("the intent id is empty or longer than {INTENT_ID_LENGTH_MAX} characters")]
    BadIntentId,
    #[error("argument `{name}` can't be part of a key: {reason}")]
    BadValue { name: String, reason: String },
    #[error("argument `{name}`: {error}")]
    Decimal { name: String, error: DecimalError },
    #[error(
        "argument `{name}` holds the invisible or direction-changing character {}, which a key \
         can't hold: two values that look alike would be two intents; send the value without it",
        code_point(*character)
    )]
    Hidden { name: String, character: char },
    #[error(
        "argument `{name}` holds {}, a compatibility form of `{plain}` (fullwidth, a ligature, a \
         superscript or similar), which a key can't hold: it looks like `{plain}` but would be \
         another intent; write `{plain}`",
        code_point(*character)
    )]
    CompatibilityForm {
        name: String,
        character: char,
        plain: String,
    },
    #[error("the rendered key is {0} bytes long; the limit is {INTENT_KEY_LENGTH_MAX}")]
    TooLong(usize),
    #[error(
        "the key uses sensitive argument `{name}`, whose keyed hash it holds, but no hash key \
         was given (gateway.hash_key in the config)"
    )]
    NoHashKey { name: String },
}

impl KeyTemplate {
    /// Parses a template. Checks syntax only; [`KeyTemplate::check_arguments`] checks names.
    pub fn parse(template: &str) -> Result<KeyTemplate, KeyError> {
        let syntax = |SyntaxError { position, reason }| KeyError::Syntax {
            template: template.to_owned(),
            position,
            reason,
        };
        let mut parts = Vec::new();
        for piece in placeholder::parse(template).map_err(syntax)? {
            parts.push(match piece {
                Piece::Literal(text) => Part::Literal(text),
                Piece::Placeholder(found) if found.is_named(INTENT_ID_PLACEHOLDER) => {
                    if found.format.is_some() {
                        return Err(syntax(SyntaxError {
                            position: found.position,
                            reason: "{intent_id} takes no format",
                        }));
                    }
                    Part::IntentId
                }
                Piece::Placeholder(Placeholder {
                    format: Some(Format::MinorUnits(_)),
                    position,
                    ..
                }) => {
                    return Err(syntax(SyntaxError {
                        position,
                        reason: "a key can't write minor units (`minor(...)` is for the \
                                 provider's request); write the amount as a decimal, \
                                 e.g. {amount:.2}, and add {currency} if it varies",
                    }));
                }
                Piece::Placeholder(Placeholder { path, format, .. }) => Part::Field {
                    path,
                    places: match format {
                        Some(Format::Places(places)) => Some(places),
                        _ => None,
                    },
                    sensitive: false,
                },
            });
        }
        if !parts.iter().any(|part| !matches!(part, Part::Literal(_))) {
            return Err(KeyError::Constant(template.to_owned()));
        }
        Ok(KeyTemplate {
            source: template.to_owned(),
            parts,
        })
    }

    /// Refuses a template that refers to anything but the tool's arguments (`argument_names`,
    /// the top-level properties of its input schema) and `{intent_id}`, or to an argument
    /// whose name suggests a per-attempt value.
    pub fn check_arguments(&self, argument_names: &[&str]) -> Result<(), KeyError> {
        for name in self.argument_names() {
            if !argument_names.contains(&name) {
                if looks_per_attempt(name) {
                    return Err(KeyError::PerAttempt {
                        name: name.to_owned(),
                    });
                }
                return Err(KeyError::NotAnArgument {
                    name: name.to_owned(),
                });
            }
            if looks_per_attempt(name) {
                return Err(KeyError::PerAttempt {
                    name: name.to_owned(),
                });
            }
        }
        Ok(())
    }

    /// The top-level argument names the template refers to, in order.
    pub fn argument_names(&self) -> impl Iterator<Item = &str> {
        self.parts.iter().filter_map(|part| match part {
            Part::Field { path, .. } => Some(path[0].as_str()),
            _ => None,
        })
    }

    /// The arguments (dotted paths) the template writes as exact decimals (`{amount:.2}`), in
    /// order: a business intent's amounts, which operators look for first.
    pub fn decimal_names(&self) -> impl Iterator<Item = String> + '_ {
        self.parts.iter().filter_map(|part| match part {
            Part::Field {
                path,
                places: Some(_),
                ..
            } => Some(path.join(".")),
            _ => None,
        })
    }

    /// Marks the placeholders that render (part of) one of `sensitive`'s arguments, so that
    /// they render a keyed hash.
    pub fn mark_sensitive(&mut self, sensitive: &[ArgumentPath]) {
        for part in &mut self.parts {
            if let Part::Field {
                path,
                sensitive: marked,
                ..
            } = part
            {
                *marked = sensitive.iter().any(|argument| argument.overlaps(path));
            }
        }
    }

    /// The names (dotted paths) of the sensitive placeholders, in order.
    pub fn sensitive_names(&self) -> impl Iterator<Item = String> + '_ {
        self.parts.iter().filter_map(|part| match part {
            Part::Field {
                path,
                sensitive: true,
                ..
            } => Some(path.join(".")),
            _ => None,
        })
    }

    /// True when the template uses `{intent_id}`.
    pub fn uses_intent_id(&self) -> bool {
        self.parts.iter().any(|part| matches!(part, Part::IntentId))
    }

    /// The template as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Renders the key for one call. A template with a sensitive placeholder needs the hash
    /// key: use [`KeyTemplate::render_with`].
    pub fn render(&self, arguments: &Value, intent_id: Option<&str>) -> Result<String, KeyError> {
        self.render_with(arguments, intent_id, None)
    }

    /// Renders the key for one call, sensitive placeholders as keyed hashes under
    /// `hash_key` (an error without one).
    pub fn render_with(
        &self,
        arguments: &Value,
        intent_id: Option<&str>,
        hash_key: Option<&HashKey>,
    ) -> Result<String, KeyError> {
        let mut key = String::new();
        for part in &self.parts {
            match part {
                Part::Literal(text) => key.push_str(text),
                Part::IntentId => {
                    let id = intent_id.ok_or(KeyError::MissingIntentId)?;
                    if id.is_empty() || id.len() > INTENT_ID_LENGTH_MAX {
                        return Err(KeyError::BadIntentId);
                    }
                    escape_into(&mut key, id);
                }
                Part::Field {
                    path,
                    places,
                    sensitive,
                } => {
                    let name = path.join(".");
                    let value = placeholder::resolve(arguments, path, Steps::FieldsOnly)
                        .ok_or_else(|| KeyError::MissingArgument(name.clone()))?;
                    let text = spelled_once(&name, &render_value(&name, value, *places)?)?;
                    if *sensitive {
                        let hash_key = hash_key.ok_or(KeyError::NoHashKey { name })?;
                        // Lowercase hex: nothing to escape.
                        key.push_str(&hash_key.key_part(&text));
                    } else {
                        escape_into(&mut key, &text);
                    }
                }
            }
        }
        if key.len() > INTENT_KEY_LENGTH_MAX {
            return Err(KeyError::TooLong(key.len()));
        }
        Ok(key)
    }

    /// The application's intent id that `key` was rendered with, recovered from the key and
    /// the stored `arguments`; `None` when the template has no `{intent_id}` or the key was
    /// not rendered from these arguments. The ledger keeps the key, not the id, so this is
    /// how a caller without the original call (the sweeper) gets the id back. A recovered id
    /// renders exactly `key` again: that is checked before it is returned.
    ///
    /// The stored arguments hold hashes in place of sensitive values, so a sensitive
    /// placeholder can't be rendered again from them: its [`KEY_HASH_HEX_LENGTH`] hex digits
    /// are taken from the key as they are.
    pub fn intent_id_in(&self, key: &str, arguments: &Value) -> Option<String> {
        if !self.uses_intent_id() {
            return None;
        }
        /// What each part of the key is, as far as the stored arguments tell.
        enum Known {
            Text(String),
            Hash,
            Id,
        }
        // Every part but the intent id and sensitive values renders from the arguments alone.
        let mut rendered = Vec::with_capacity(self.parts.len());
        for part in &self.parts {
            rendered.push(match part {
                Part::Literal(text) => Known::Text(text.clone()),
                Part::IntentId => Known::Id,
                Part::Field {
                    sensitive: true, ..
                } => Known::Hash,
                Part::Field { path, places, .. } => {
                    let name = path.join(".");
                    let value = placeholder::resolve(arguments, path, Steps::FieldsOnly)?;
                    let mut text = String::new();
                    escape_into(&mut text, &render_value(&name, value, *places).ok()?);
                    Known::Text(text)
                }
            });
        }
        // Each occurrence of the id has the same escaped length.
        let known: usize = rendered
            .iter()
            .map(|part| match part {
                Known::Text(text) => text.len(),
                Known::Hash => KEY_HASH_HEX_LENGTH,
                Known::Id => 0,
            })
            .sum();
        let occurrences = rendered
            .iter()
            .filter(|part| matches!(part, Known::Id))
            .count();
        let id_length = key.len().checked_sub(known)? / occurrences;
        // Walk the key part by part: the literal and rendered parts must be there as they
        // are, a hash must be hex, and every occurrence of the id the same text.
        let mut rest = key;
        let mut escaped: Option<&str> = None;
        for part in &rendered {
            let taken = match part {
                Known::Text(text) => {
                    rest.strip_prefix(text.as_str())?;
                    text.len()
                }
                Known::Hash => {
                    let hash = rest.get(..KEY_HASH_HEX_LENGTH)?;
                    let hex = |byte: u8| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte);
                    if !hash.bytes().all(hex) {
                        return None;
                    }
                    KEY_HASH_HEX_LENGTH
                }
                Known::Id => {
                    let id = rest.get(..id_length)?;
                    if escaped.is_some_and(|first| first != id) {
                        return None;
                    }
                    escaped = Some(id);
                    id_length
                }
            };
            rest = rest.get(taken..)?;
        }
        let escaped = escaped?;
        let id = percent_decode_str(escaped).decode_utf8().ok()?.into_owned();
        let mut canonical = String::new();
        escape_into(&mut canonical, &id);
        // Nothing may be left over, the id must be one a call may carry, and it must be written
        // as `escape_into` writes it, so that it renders exactly `key` again.
        let usable = !id.is_empty() && id.len() <= INTENT_ID_LENGTH_MAX;
        (rest.is_empty() && usable && canonical == escaped).then_some(id)
    }
}

/// A value as key text, its error naming the argument.
fn render_value(name: &str, value: &Value, places: Option<u32>) -> Result<String, KeyError> {
    let format = places.map(Format::Places);
    // A key's formats never read other arguments (minor units are refused when parsed).
    placeholder::render_value(value, format.as_ref(), &Value::Null, Steps::FieldsOnly).map_err(
        |error| match error {
            ValueError::Decimal(error) => KeyError::Decimal {
                name: name.to_owned(),
                error,
            },
            ValueError::Currency(error) => KeyError::BadValue {
                name: name.to_owned(),
                reason: error.to_string(),
            },
            ValueError::NoText(reason) => KeyError::BadValue {
                name: name.to_owned(),
                reason: reason.into(),
            },
        },
    )
}

/// A rendered value in its one spelling ([`text::nfc`]), or the error naming the argument
/// when it holds what a person can't see or tell apart ([`text::hidden_character`],
/// [`text::compatibility_character`]). Checked when a call renders its key, not when a
/// stored intent's key is read back, so intents recorded before this check stay readable.
fn spelled_once(name: &str, rendered: &str) -> Result<String, KeyError> {
    let composed = text::nfc(rendered);
    if let Some(character) = text::hidden_character(&composed) {
        return Err(KeyError::Hidden {
            name: name.to_owned(),
            character,
        });
    }
    if let Some((character, plain)) = text::compatibility_character(&composed) {
        return Err(KeyError::CompatibilityForm {
            name: name.to_owned(),
            character,
            plain: text::printable(&plain),
        });
    }
    Ok(composed.into_owned())
}

/// `U+200D`: a character named by its code point, since it may not show.
fn code_point(character: char) -> String {
    format!("U+{:04X}", character as u32)
}

/// The ASCII characters that could blur the boundaries between key parts: the template's
/// separators and braces, `%` itself, spaces and control characters.
const KEY_ESCAPED: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'%')
    .add(b':')
    .add(b'/')
    .add(b'{')
    .add(b'}')
    .add(b'#')
    .add(b'?');

/// True for a character outside ASCII that is escaped too: Unicode's other spaces and
/// control characters. Every other one is kept as written, so keys stored in a ledger render
/// the same as they always have.
fn escaped_beyond_ascii(c: char) -> bool {
    !c.is_ascii() && (c.is_whitespace() || c.is_control())
}

/// Percent-encodes, as `%XX` per UTF-8 byte, what could blur the boundaries between key
/// parts. `percent-encoding` escapes every byte outside ASCII, so the text goes to it in runs
/// that end before each character outside ASCII that a key keeps.
fn escape_into(key: &mut String, value: &str) {
    let mut rest = value;
    while !rest.is_empty() {
        let kept = rest
            .char_indices()
            .find(|(_, c)| !c.is_ascii() && !escaped_beyond_ascii(*c));
        let end = kept.map_or(rest.len(), |(at, _)| at);
        key.extend(utf8_percent_encode(&rest[..end], KEY_ESCAPED));
        rest = &rest[end..];
        if let Some((_, c)) = kept {
            key.push(c);
            rest = &rest[c.len_utf8()..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(template: &str, arguments: Value) -> Result<String, KeyError> {
        KeyTemplate::parse(template)
            .unwrap()
            .render(&arguments, None)
    }

    #[test]
    fn amounts_written_three_ways_give_one_key() {
        let keys: Vec<String> = [json!(49), json!(49.0), json!("49.00")]
            .into_iter()
            .map(|amount| {
                render(
                    "refund:{order_id}:{amount:.2}",
                    json!({"order_id": "8812", "amount": amount}),
                )
                .unwrap()
            })
            .collect();
        assert_eq!(keys, ["refund:8812:49.00"; 3]);
    }

    #[test]
    fn the_decimal_placeholders_name_the_amounts() {
        let template =
            KeyTemplate::parse("pay:{order.id}:{amount:.2}:{fee.total:.0}:{intent_id}").unwrap();
        assert_eq!(
            template.decimal_names().collect::<Vec<_>>(),
            ["amount", "fee.total"]
        );
        let plain = KeyTemplate::parse("email:{to}:{template_id}").unwrap();
        assert_eq!(plain.decimal_names().count(), 0);
    }

    #[test]
    fn composed_and_decomposed_accents_give_one_key() {
        let composed = render("refund:{order_id}", json!({"order_id": "caf\u{e9}-12"})).unwrap();
        let decomposed = render("refund:{order_id}", json!({"order_id": "cafe\u{301}-12"}));
        assert_eq!(decomposed.unwrap(), composed);
        assert_eq!(composed, "refund:caf\u{e9}-12");
    }

    #[test]
    fn an_invisible_character_in_a_key_argument_is_refused_naming_it() {
        // A zero-width joiner inside an order id rendered a second key that looked the same.
        for (hidden, name) in [("\u{200d}", "U+200D"), ("\u{feff}", "U+FEFF")] {
            let error = render(
                "refund:{order.id}",
                json!({"order": {"id": format!("88{hidden}12")}}),
            )
            .unwrap_err();
            assert_eq!(
                error,
                KeyError::Hidden {
                    name: "order.id".into(),
                    character: hidden.chars().next().unwrap()
                }
            );
            let message = error.to_string();
            assert!(
                message.contains("`order.id`") && message.contains(name),
                "{message}"
            );
        }
    }

    #[test]
    fn a_direction_control_in_a_key_argument_is_refused() {
        for control in ['\u{202e}', '\u{2066}', '\u{200f}', '\u{061c}'] {
            let refused = render(
                "r:{order_id}",
                json!({"order_id": format!("{control}2188")}),
            );
            assert!(
                matches!(&refused, Err(KeyError::Hidden { name, character }) if name == "order_id" && *character == control),
                "{refused:?}"
            );
        }
        // Hashed or not: a sensitive argument is checked before it is hashed.
        let hash_key = HashKey::new(&[3u8; 32]).unwrap();
        let refused = sensitive_template("e:{to}", &["to"]).render_with(
            &json!({"to": "a\u{200b}@example.com"}),
            None,
            Some(&hash_key),
        );
        assert!(
            matches!(refused, Err(KeyError::Hidden { .. })),
            "{refused:?}"
        );
    }

    #[test]
    fn a_fullwidth_digit_in_a_key_argument_is_refused_saying_what_to_write() {
        let error = render("r:{order_id}", json!({"order_id": "ord_\u{ff11}"})).unwrap_err();
        assert_eq!(
            error,
            KeyError::CompatibilityForm {
                name: "order_id".into(),
                character: '\u{ff11}',
                plain: "1".into()
            }
        );
        assert!(error.to_string().contains("U+FF11"), "{error}");
        assert!(error.to_string().contains("write `1`"), "{error}");
        // Other scripts are no compatibility forms.
        render("r:{order_id}", json!({"order_id": "注文-١٢"})).unwrap();
    }

    #[test]
    fn unformatted_numbers_are_canonical_and_strings_verbatim() {
        assert_eq!(render("x:{n}", json!({"n": 12.50})).unwrap(), "x:12.5");
        assert_eq!(render("x:{n}", json!({"n": "12.50"})).unwrap(), "x:12.50");
        assert_eq!(render("x:{b}", json!({"b": true})).unwrap(), "x:true");
        assert_eq!(
            render("{customer.id}/{{lit}}", json!({"customer": {"id": "c1"}})).unwrap(),
            "c1/{lit}"
        );
    }

    #[test]
    fn separators_inside_values_are_escaped_so_keys_stay_distinct() {
        let a = render("{a}:{b}", json!({"a": "x:y", "b": "z"})).unwrap();
        let b = render("{a}:{b}", json!({"a": "x", "b": "y:z"})).unwrap();
        assert_ne!(a, b);
        assert_eq!(a, "x%3Ay:z");
        assert_eq!(
            render("{a}", json!({"a": "50% off\n"})).unwrap(),
            "50%25%20off%0A"
        );
    }

    #[test]
    fn a_template_referring_to_anything_but_arguments_is_refused_with_the_reason() {
        let template = KeyTemplate::parse("refund:{order_id}:{tool_call_id}").unwrap();
        let error = template
            .check_arguments(&["order_id", "amount"])
            .unwrap_err();
        assert_eq!(
            error,
            KeyError::PerAttempt {
                name: "tool_call_id".into()
            }
        );
        assert!(
            error.to_string().contains("changes on every attempt"),
            "{error}"
        );

        let template = KeyTemplate::parse("refund:{order}:{amount:.2}").unwrap();
        let error = template
            .check_arguments(&["order_id", "amount"])
            .unwrap_err();
        assert_eq!(
            error,
            KeyError::NotAnArgument {
                name: "order".into()
            }
        );
        assert!(
            error
                .to_string()
                .contains("only the tool's arguments and {intent_id}"),
            "{error}"
        );

        // Even a declared argument is refused when its name says it changes per attempt.
        let template = KeyTemplate::parse("refund:{request_id}").unwrap();
        assert!(matches!(
            template.check_arguments(&["request_id"]),
            Err(KeyError::PerAttempt { .. })
        ));

        for (template, names) in [
            ("refund:{order_id}:{amount:.2}", &["order_id", "amount"][..]),
            ("r:{intent_id}", &[][..]),
        ] {
            KeyTemplate::parse(template)
                .unwrap()
                .check_arguments(names)
                .unwrap();
        }
    }

    #[test]
    fn per_attempt_names_are_recognised() {
        for name in [
            "tool_call_id",
            "TOOL_CALL_ID",
            "openai_request_id",
            "timestamp",
            "nonce",
            "uuid",
            "attempt",
        ] {
            assert!(looks_per_attempt(name), "{name}");
        }
        for name in ["order_id", "amount", "customer_id", "reason", "currency"] {
            assert!(!looks_per_attempt(name), "{name}");
        }
    }

    #[test]
    fn malformed_templates_are_refused() {
        for template in [
            "refund:{order_id",
            "refund:order_id}",
            "x:{}",
            "x:{a:2}",
            "x:{a:.x}",
            "x:{a b}",
            "x:{intent_id:.2}",
            "x:{amount:minor(USD)}",
            "x:{amount:minor(currency)}",
        ] {
            assert!(
                matches!(KeyTemplate::parse(template), Err(KeyError::Syntax { .. })),
                "{template}"
            );
        }
        assert!(matches!(
            KeyTemplate::parse("refund"),
            Err(KeyError::Constant(_))
        ));
    }

    #[test]
    fn a_key_refuses_minor_units_and_says_what_to_write() {
        let error = KeyTemplate::parse("refund:{pi}:{amount:minor(USD)}").unwrap_err();
        let KeyError::Syntax {
            position, reason, ..
        } = &error
        else {
            panic!("{error:?}");
        };
        assert_eq!(*position, 12);
        assert!(reason.contains("{amount:.2}"), "{error}");
    }

    #[test]
    fn intent_id_comes_from_the_application() {
        let template = KeyTemplate::parse("refund:{intent_id}").unwrap();
        assert!(template.uses_intent_id());
        assert_eq!(
            template.render(&json!({}), Some("int_7")).unwrap(),
            "refund:int_7"
        );
        assert_eq!(
            template.render(&json!({}), None),
            Err(KeyError::MissingIntentId)
        );
        assert_eq!(
            template.render(&json!({}), Some("")),
            Err(KeyError::BadIntentId)
        );
    }

    #[test]
    fn the_intent_id_is_recovered_from_the_key_it_rendered() {
        let arguments = json!({"order_id": "88:12", "amount": 49});
        for (template, id) in [
            ("refund:{intent_id}", "int_7"),
            ("refund:{order_id}:{intent_id}:{amount:.2}", "int 7/ü%"),
            ("{intent_id}", "a:b"),
            ("r:{intent_id}:again:{intent_id}", "int_9"),
        ] {
            let template = KeyTemplate::parse(template).unwrap();
            let key = template.render(&arguments, Some(id)).unwrap();
            assert_eq!(
                template.intent_id_in(&key, &arguments).as_deref(),
                Some(id),
                "{key}"
            );
        }
        let template = KeyTemplate::parse("refund:{order_id}:{intent_id}").unwrap();
        let key = template.render(&arguments, Some("int_7")).unwrap();
        let other = json!({"order_id": "9", "amount": 49});
        assert_eq!(template.intent_id_in(&key, &other), None, "other arguments");
        assert_eq!(template.intent_id_in("refund:88%3A12:", &arguments), None);
        assert_eq!(template.intent_id_in("elsewhere", &arguments), None);
        let without = KeyTemplate::parse("refund:{order_id}").unwrap();
        assert_eq!(without.intent_id_in("refund:88%3A12", &arguments), None);
    }

    fn sensitive_template(text: &str, names: &[&str]) -> KeyTemplate {
        let mut template = KeyTemplate::parse(text).unwrap();
        let paths: Vec<ArgumentPath> = names
            .iter()
            .map(|name| ArgumentPath::new(name.split('.').map(str::to_owned).collect()))
            .collect();
        template.mark_sensitive(&paths);
        template
    }

    #[test]
    fn a_sensitive_placeholder_renders_a_keyed_hash_never_the_value() {
        let hash_key = HashKey::new(&[3u8; 32]).unwrap();
        let template = sensitive_template("email:{to}:{reference}", &["to"]);
        let arguments = json!({"to": "a@example.com", "reference": "88:12"});
        let key = template
            .render_with(&arguments, None, Some(&hash_key))
            .unwrap();
        assert_eq!(
            key,
            format!("email:{}:88%3A12", hash_key.key_part("a@example.com"))
        );
        assert!(!key.contains("example"), "{key}");
        // Without the key the template refuses rather than write the value.
        assert_eq!(
            template.render(&arguments, None),
            Err(KeyError::NoHashKey { name: "to".into() })
        );
        assert_eq!(template.sensitive_names().collect::<Vec<_>>(), ["to"]);
    }

    #[test]
    fn a_sensitive_amount_keeps_its_decimal_rules_before_it_is_hashed() {
        let hash_key = HashKey::new(&[3u8; 32]).unwrap();
        let template = sensitive_template("refund:{order_id}:{amount:.2}", &["amount"]);
        let keys: Vec<String> = [json!(49), json!(49.0), json!("49.00")]
            .into_iter()
            .map(|amount| {
                template
                    .render_with(
                        &json!({"order_id": "8812", "amount": amount}),
                        None,
                        Some(&hash_key),
                    )
                    .unwrap()
            })
            .collect();
        let expected = format!("refund:8812:{}", hash_key.key_part("49.00"));
        assert_eq!(keys, vec![expected; 3]);
        let refused = template.render_with(
            &json!({"order_id": "8812", "amount": 49.005}),
            None,
            Some(&hash_key),
        );
        assert!(
            matches!(refused, Err(KeyError::Decimal { .. })),
            "{refused:?}"
        );
        // An unformatted sensitive number hashes its canonical decimal text.
        let plain = sensitive_template("n:{n}", &["n"]);
        assert_eq!(
            plain
                .render_with(&json!({"n": 12.50}), None, Some(&hash_key))
                .unwrap(),
            format!("n:{}", hash_key.key_part("12.5"))
        );
    }

    #[test]
    fn the_intent_id_is_recovered_past_sensitive_hashes_from_stored_arguments() {
        // The sweeper has only the stored arguments, where sensitive values are hashes: the
        // id must still come back, and a wrong one must not.
        let hash_key = HashKey::new(&[3u8; 32]).unwrap();
        let template = sensitive_template(
            "charge:{customer.email}:{intent_id}:{amount:.2}",
            &["customer"],
        );
        let arguments = json!({"customer": {"email": "a@example.com"}, "amount": 25});
        let key = template
            .render_with(&arguments, Some("int:7"), Some(&hash_key))
            .unwrap();
        let stored = json!({"customer": hash_key.hash_value(&arguments["customer"]), "amount": 25});
        assert_eq!(
            template.intent_id_in(&key, &stored).as_deref(),
            Some("int:7")
        );
        let other_amount = json!({"customer": stored["customer"].clone(), "amount": 26});
        assert_eq!(template.intent_id_in(&key, &other_amount), None);
        let tampered = key.replacen(&hash_key.key_part("a@example.com")[..4], "zzzz", 1);
        assert_eq!(template.intent_id_in(&tampered, &stored), None);
    }

    #[test]
    fn render_errors_name_the_argument() {
        let error = render("r:{order_id}:{amount:.2}", json!({"order_id": "1"})).unwrap_err();
        assert_eq!(error, KeyError::MissingArgument("amount".into()));
        let error = render("r:{amount:.2}", json!({"amount": 49.005})).unwrap_err();
        assert!(
            error.to_string().contains("amount") && error.to_string().contains("round"),
            "{error}"
        );
        assert!(matches!(
            render("r:{a}", json!({"a": null})),
            Err(KeyError::BadValue { .. })
        ));
        assert!(matches!(
            render("r:{a}", json!({"a": "x".repeat(600)})),
            Err(KeyError::TooLong(_))
        ));
    }
}

/// Longest idempotency key sent to a provider (Stripe's limit is 255).
pub const PROVIDER_KEY_LENGTH_MAX: usize = 255;

/// How a provider key too long to send as it is starts: its SHA-256 in hex follows.
pub const HASHED_PROVIDER_KEY_PREFIX: &str = "ig-sha256-";

/// The (tenant, intent key) pairs a provider key of `tool` may have been made from by
/// [`provider_key`]: `<tenant>/<tool>:<key>`, or `<tool>:<key>` for the default tenant,
/// perhaps with an epoch `#N` after the key (a key may hold `#` itself, so both readings
/// are offered). Empty for a key `provider_key` never makes for `tool`, and for a hashed
/// one, which can't be read back. A reading is a candidate only: the caller checks that
/// the intent it names gives the same provider key back.
pub fn provider_key_readings<'k>(tool: &str, provider_key: &'k str) -> Vec<(&'k str, &'k str)> {
    let mut scopes = vec![("default", provider_key)];
    if let Some((tenant, rest)) = provider_key.split_once('/') {
        scopes.push((tenant, rest));
    }
    let mut readings = Vec::new();
    for (tenant, rest) in scopes {
        let Some(key) = rest
            .strip_prefix(tool)
            .and_then(|rest| rest.strip_prefix(':'))
        else {
            continue;
        };
        readings.push((tenant, key));
        if let Some((without_epoch, epoch)) = key.rsplit_once('#')
            && epoch.parse::<u32>().is_ok_and(|epoch| epoch > 1)
        {
            readings.push((tenant, without_epoch));
        }
    }
    readings
}

/// True when `key` has a form [`provider_key`] makes for `tool` (hashed keys included).
pub fn is_provider_key_of(tool: &str, key: &str) -> bool {
    key.starts_with(HASHED_PROVIDER_KEY_PREFIX) || !provider_key_readings(tool, key).is_empty()
}

/// The idempotency key sent to the provider for an intent: readable where it fits
/// (`refund_order:refund:8812:49.00`), scoped by tenant and tool so two tools or tenants
/// never share a provider key, and carrying the epoch after a rejected intent starts again
/// (`...#2`), so the provider does not replay the old rejection. Too long a key is replaced
/// by its SHA-256, which is just as stable.
pub fn provider_key(tenant: &str, tool: &str, key: &str, epoch: u32) -> String {
    use sha2::{Digest, Sha256};
    use std::fmt::Write as _;
    let mut text = if tenant == "default" {
        format!("{tool}:{key}")
    } else {
        format!("{tenant}/{tool}:{key}")
    };
    if epoch > 1 {
        write!(text, "#{epoch}").expect("writing to a String can't fail");
    }
    if text.len() <= PROVIDER_KEY_LENGTH_MAX {
        return text;
    }
    let digest = Sha256::digest(text.as_bytes());
    let mut hashed = String::from(HASHED_PROVIDER_KEY_PREFIX);
    for byte in digest.iter() {
        write!(hashed, "{byte:02x}").expect("writing to a String can't fail");
    }
    hashed
}

#[cfg(test)]
mod provider_key_tests {
    use super::{is_provider_key_of, provider_key, provider_key_readings};

    #[test]
    fn a_provider_key_is_read_back_into_its_tenant_and_intent_key() {
        let tool = "refund_order";
        for (tenant, key, epoch) in [
            ("default", "refund:8812:49.00", 1),
            ("acme", "refund:8812:49.00", 1),
            ("acme", "charge:c/1#x", 3),
            ("default", "a/refund_order:b", 1),
        ] {
            let sent = provider_key(tenant, tool, key, epoch);
            assert!(
                provider_key_readings(tool, &sent).contains(&(tenant, key)),
                "{sent} must read back as ({tenant}, {key})"
            );
            assert!(is_provider_key_of(tool, &sent));
        }
        assert!(provider_key_readings(tool, "charge_card:x").is_empty());
        assert!(provider_key_readings(tool, "ig-sha256-00").is_empty());
        assert!(is_provider_key_of(
            tool,
            &provider_key("t", tool, &"k".repeat(400), 1)
        ));
        assert!(!is_provider_key_of(tool, "order-8812-partial"));
        assert!(!is_provider_key_of(tool, "south/charge_card:x"));
    }

    #[test]
    fn provider_keys_are_scoped_stable_and_bounded() {
        assert_eq!(
            provider_key("default", "refund_order", "refund:8812:49.00", 1),
            "refund_order:refund:8812:49.00"
        );
        assert_eq!(
            provider_key("acme", "refund_order", "r:1", 1),
            "acme/refund_order:r:1"
        );
        assert_eq!(
            provider_key("default", "charge_card", "c:1", 2),
            "charge_card:c:1#2"
        );
        let long = provider_key("default", "t", &"k".repeat(400), 1);
        assert_eq!(long.len(), "ig-sha256-".len() + 64);
        assert_eq!(long, provider_key("default", "t", &"k".repeat(400), 1));
    }
}

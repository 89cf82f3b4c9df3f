//! The `Idempotency-Key` request header of `POST /v1/tools/{name}/call` and of the intent
//! API's `POST /v1/tools/{name}/intents`, with the IETF draft's semantics
//! (draft-ietf-httpapi-idempotency-key-header).
//!
//! The header never stands in for another intent: the intent key is always the tool's
//! business key, rendered from the arguments, so a caller can't reach an intent (or a
//! provider record) that its arguments don't name. For a side effect the header's value
//! becomes `CallContext::explicit_key`, the caller's own key for the operation:
//!
//! - for a key template that uses `{intent_id}`, it is the intent id (the application's id
//!   for the operation, which is what the header means), so the key keeps the template's
//!   shape (`charge:{customer_id}:<header>`); an `Intent-Id` header that names
//!   another id is a 400, and one longer than an intent id may be too;
//! - for every side effect, the gate binds it in the ledger, within the caller's tenant and
//!   the tool, to the intent its first call named (key and fingerprint). A later call with
//!   the same header and another payload (another business key, or other arguments) is the
//!   draft's 422, naming what differs, and nothing is executed; the same business intent
//!   under a second header value is the same intent, answered as any repeat (`already_done`,
//!   or a wait while it runs). A header value is only ever compared with the values of the
//!   caller's own tenant and the tool.
//!
//! A call that arrives while the first call with its key is still running waits for it, as
//! any repeat does, and gets the same answer: the draft's 409 would only make the client
//! retry until it got that answer. Reads and idempotent tools record no intent, so they
//! ignore a well-formed header.
//!
//! The draft makes the value a structured-field string (RFC 8941 `sf-string`): a quoted
//! string of printable ASCII where `\"` and `\\` are the only escapes. Many clients send the
//! bare value instead (`Idempotency-Key: 8e03978e-...`), so a value that does not begin with
//! a quote is taken as it is, when it is visible ASCII without quotes or backslashes.
//! `"abc"` and `abc` name the same key.
//!
//! The headers a call and a grant read are described here for the OpenAPI document
//! ([`CallHeaders`]) and read as text here ([`header_text`]).

use axum::http::{HeaderMap, StatusCode};
use intentgate_core::limits::{CALLER_KEY_LENGTH_MAX, INTENT_ID_LENGTH_MAX};
use intentgate_core::{Effect, ToolDefinition};
use utoipa::IntoParams;

use crate::problem::Problem;

/// The header's name (header names are case-insensitive; `http` keeps them lowercase).
pub const IDEMPOTENCY_KEY_HEADER: &str = "idempotency-key";
/// The header that carries the application's intent id.
pub const INTENT_ID_HEADER: &str = "intent-id";

/// The headers a call reads (as text, with `header_text` and `idempotency_key`), described
/// for the OpenAPI document.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
#[allow(dead_code)] // Read from the `HeaderMap`; this type only describes them.
pub struct CallHeaders {
    /// The caller's key for this operation (IETF draft semantics), for a side effect. It never
    /// replaces the tool's business key: the same business intent under two keys is one
    /// intent, and a key is bound, within the caller's tenant and the tool, to the intent its
    /// first call named, so another payload under it is a 422 and nothing is executed. For a
    /// key that uses `{intent_id}` it is the intent id (an `Intent-Id` that disagrees is a
    /// 400). Required where the tool says `idempotency_key: required`.
    #[param(rename = "Idempotency-Key", required = false)]
    idempotency_key: String,
    /// The application's intent id, for keys that use `{intent_id}`.
    #[param(rename = "Intent-Id", required = false)]
    intent_id: String,
}

/// A header's value as trimmed text; 400 when it is not visible ASCII.
pub fn header_text(headers: &HeaderMap, name: &str) -> Result<Option<String>, Problem> {
    match headers.get(name) {
        None => Ok(None),
        Some(value) => value
            .to_str()
            .map(|text| Some(text.trim().to_owned()))
            .map_err(|_| {
                Problem::new(
                    StatusCode::BAD_REQUEST,
                    "bad-header",
                    "Unreadable header",
                    format!("the {name} header must be visible ASCII"),
                )
            }),
    }
}

/// The keys of a call of `tool` that go into its `CallContext`: the application's intent id
/// (`Intent-Id`) and the caller's own key for the operation (`Idempotency-Key`, for a side
/// effect; `None` for a read or an idempotent tool, which record no intent).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallKeys {
    pub intent_id: Option<String>,
    pub caller_key: Option<String>,
}

/// The [`CallKeys`] of a call of `tool`, which `required` says must send the header. A
/// malformed header is a 400 on every tool (the client's mistake is worth telling); a side
/// effect that requires the header and lacks it is a 400; so is, for a key that uses
/// `{intent_id}` (which the header stands for), a header over an intent id's length, or an
/// `Intent-Id` that names another id.
pub fn call_keys(
    headers: &HeaderMap,
    tool: &ToolDefinition,
    required: bool,
) -> Result<CallKeys, Problem> {
    let caller_key = from_headers(headers)?.filter(|_| tool.effect == Effect::SideEffect);
    if caller_key.is_none() && tool.effect == Effect::SideEffect && required {
        return Err(self::required(&tool.name));
    }
    let intent_id = header_text(headers, INTENT_ID_HEADER)?;
    let keyed_by_id = tool.key.as_ref().is_some_and(|key| key.uses_intent_id());
    if let (true, Some(key)) = (keyed_by_id, &caller_key) {
        if key.len() > INTENT_ID_LENGTH_MAX {
            return Err(malformed(&format!(
                "tool `{}`'s key uses {{intent_id}}, which the Idempotency-Key stands for: its key \
                 is {} characters, and an intent id is at most {INTENT_ID_LENGTH_MAX}",
                tool.name,
                key.len()
            )));
        }
        if let Some(id) = intent_id.as_deref().filter(|id| id != key) {
            return Err(Problem::new(
                StatusCode::BAD_REQUEST,
                "intent-id-mismatch",
                "Intent-Id and Idempotency-Key disagree",
                format!(
                    "tool `{}`'s key uses {{intent_id}}, which the Idempotency-Key stands for, and \
                     the Intent-Id `{}` is another id than the Idempotency-Key `{}`: send one of \
                     the two headers, or the same value in both; nothing was recorded or executed",
                    tool.name,
                    id.escape_default(),
                    key.escape_default()
                ),
            ));
        }
    }
    Ok(CallKeys {
        intent_id,
        caller_key,
    })
}

/// The header's key, if the request sent one; a header that is not a usable key is a 400
/// saying what is wrong with it.
pub fn from_headers(headers: &HeaderMap) -> Result<Option<String>, Problem> {
    let mut values = headers.get_all(IDEMPOTENCY_KEY_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(malformed(
            "the request has more than one Idempotency-Key header; send exactly one",
        ));
    }
    // Not visible ASCII (obs-text, bytes over 0x7F) is refused by the parse below too, but
    // `to_str` is what tells it apart without looking at bytes by hand.
    let text = value.to_str().map_err(|_| {
        malformed("the Idempotency-Key header must be printable ASCII (an RFC 8941 string)")
    })?;
    parse(text).map(Some).map_err(|reason| malformed(&reason))
}

/// The key a header value names: a quoted `sf-string` with its escapes undone, or a bare
/// value as it is. The reason of a refusal is a sentence about the header.
fn parse(value: &str) -> Result<String, String> {
    // HTTP allows whitespace around a field value; RFC 8941 parsers drop it too.
    let value = value.trim_matches([' ', '\t']);
    let key = match value.strip_prefix('"') {
        Some(quoted) => unquote(quoted)?,
        None => bare(value)?,
    };
    if key.is_empty() {
        return Err(
            "the Idempotency-Key header is empty; send a unique key per operation, e.g. a UUID"
                .to_owned(),
        );
    }
    if key.len() > CALLER_KEY_LENGTH_MAX {
        return Err(format!(
            "the Idempotency-Key header's key is {} characters; the limit is {CALLER_KEY_LENGTH_MAX}",
            key.len()
        ));
    }
    Ok(key)
}

/// The rest of an `sf-string` after its opening quote, unescaped. Anything after the closing
/// quote (RFC 8941 parameters such as `;a=1`) is refused: the draft defines none.
fn unquote(quoted: &str) -> Result<String, String> {
    let mut key = String::with_capacity(quoted.len());
    let mut characters = quoted.chars();
    while let Some(character) = characters.next() {
        match character {
            '"' => {
                let rest = characters.as_str();
                if !rest.is_empty() {
                    return Err(format!(
                        "the Idempotency-Key header has `{}` after its closing quote; send only the quoted key",
                        rest.escape_default()
                    ));
                }
                return Ok(key);
            }
            '\\' => match characters.next() {
                Some(escaped @ ('"' | '\\')) => key.push(escaped),
                _ => {
                    return Err("the Idempotency-Key header has a backslash that escapes neither `\"` nor `\\`; RFC 8941 strings allow only those two escapes".to_owned());
                }
            },
            ' '..='~' => key.push(character),
            other => return Err(not_printable(other)),
        }
    }
    Err(
        "the Idempotency-Key header opens a quote it never closes; send \"<key>\" or the bare key"
            .to_owned(),
    )
}

/// An unquoted value: visible ASCII, and no `"` or `\`, which only mean something quoted.
fn bare(value: &str) -> Result<String, String> {
    match value
        .chars()
        .find(|character| !character.is_ascii_graphic() || matches!(character, '"' | '\\'))
    {
        None => Ok(value.to_owned()),
        Some(' ' | '\t') => Err(
            "the Idempotency-Key header has whitespace in an unquoted key; quote it (\"<key>\") or leave the whitespace out"
                .to_owned(),
        ),
        Some(quote @ ('"' | '\\')) => Err(format!(
            "the Idempotency-Key header has `{quote}` in an unquoted key; send the key as an RFC 8941 string, \"<key>\", with `\\\"` and `\\\\` escapes"
        )),
        Some(other) => Err(not_printable(other)),
    }
}

fn not_printable(character: char) -> String {
    format!(
        "the Idempotency-Key header contains {}, which is not printable ASCII; keys are RFC 8941 strings of characters from space to `~`",
        character.escape_default()
    )
}

fn malformed(detail: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "bad-idempotency-key",
        "Malformed Idempotency-Key header",
        format!("{detail}; nothing was recorded or executed"),
    )
}

/// A call to a tool that requires the header, without it.
pub fn required(tool: &str) -> Problem {
    Problem::new(
        StatusCode::BAD_REQUEST,
        "idempotency-key-required",
        "Idempotency-Key header required",
        format!(
            "tool `{tool}` requires an Idempotency-Key header: send `Idempotency-Key: \"<key>\"` with a key unique to this operation (a UUID), and the same key when you repeat it; nothing was recorded or executed"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn a_quoted_string_is_unescaped_and_a_bare_value_taken_as_it_is() {
        assert_eq!(parse("\"8e03978e-40d5\"").unwrap(), "8e03978e-40d5");
        assert_eq!(parse("8e03978e-40d5").unwrap(), "8e03978e-40d5");
        assert_eq!(parse(r#""a \"b\" \\ c""#).unwrap(), r#"a "b" \ c"#);
        assert_eq!(parse("  \"k\"\t").unwrap(), "k");
    }

    #[test]
    fn malformed_values_are_refused_with_what_is_wrong() {
        let cases = [
            ("\"\"", "empty"),
            ("", "empty"),
            ("\"abc", "never closes"),
            ("\"abc\";p=1", "after its closing quote"),
            (r#""a\nb""#, "backslash"),
            ("a b", "whitespace"),
            ("a\"b", "unquoted key"),
            ("\"a\u{7f}\"", "not printable"),
            ("a\u{1}", "not printable"),
        ];
        for (value, expected) in cases {
            let reason = parse(value).unwrap_err();
            assert!(reason.contains(expected), "{value:?}: {reason}");
        }
    }

    #[test]
    fn the_key_length_is_bounded_by_the_ledger() {
        let longest = "k".repeat(super::CALLER_KEY_LENGTH_MAX);
        assert_eq!(parse(&longest).unwrap(), longest);
        let reason = parse(&format!("\"{longest}k\"")).unwrap_err();
        assert!(reason.contains("the limit is"), "{reason}");
    }
}

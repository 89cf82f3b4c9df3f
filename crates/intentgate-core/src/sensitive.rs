//! Sensitive arguments: what the ledger keeps of an email address or a message body.
//!
//! The ledger keeps every intent's arguments for as long as it keeps the intent (30 days by
//! default), because a conflict must say which field changed and the sweeper and lookups
//! work from them. Some arguments are personal data the gateway has no business keeping in
//! clear: a recipient's address, a message body. A tool marks them in its input schema with
//! `sensitive: true` on the property (top level, or nested under an object property's
//! `properties`), and the ledger then keeps a keyed hash in their place:
//!
//! - **Arguments** hold `"hmac-sha256:<64 hex>"`, the HMAC-SHA256 of the value's canonical
//!   JSON ([`write_canonical`]: the text a fingerprint hashes) under the deployment's hash
//!   key. Equal values give equal hashes, so a conflict can still tell which field changed;
//!   without the key nobody can test a guess (an address book) against them.
//! - **Keys**: a key placeholder that names a sensitive argument renders the first
//!   [`KEY_HASH_HEX_LENGTH`] hex digits of the HMAC of the text it would have rendered (the
//!   exact decimal for `{amount:.2}`), so the clear value never reaches the key column or the
//!   provider's idempotency key.
//! - **Results**: a string or number of the provider's answer whose hash equals the hash of a
//!   sensitive argument (the provider echoing the address back) is stored as that hash too.
//!
//! The gate fingerprints the arguments in this hashed form, so that the fingerprint (an
//! unkeyed SHA-256) can't be used to test guesses either; equal values hash alike, so an
//! identical repeat still matches and a changed sensitive value is still a conflict. Hashes
//! depend on the key: under a new key nothing stored matches any more (docs/ledger.md).
//!
//! Like the rest of the core, this module does no I/O: the key arrives as bytes.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use serde_json::Value;
use sha2::Sha256;

use crate::fingerprint::write_canonical;

/// Shortest hash key, in bytes. HMAC-SHA256's security rests on the key; 32 bytes (as
/// `openssl rand -hex 32` writes 64 characters of) is SHA-256's own output size.
pub const HASH_KEY_BYTES_MIN: usize = 32;
/// What a stored hash starts with, so that a reader of the ledger sees what it is.
pub const HASH_PREFIX: &str = "hmac-sha256:";
/// Hex digits of the HMAC a key placeholder renders: 128 bits, collision-free among the
/// intents of one tool, and short enough to leave room in a 255-character provider key.
pub const KEY_HASH_HEX_LENGTH: usize = 32;
/// The schema keyword that marks a property.
pub const SENSITIVE_KEYWORD: &str = "sensitive";

/// Schema keywords whose value holds subschemas (a schema, an array of them, or a map of
/// them). A `sensitive` mark found under one of them is refused: it would not be on a
/// property of the arguments, and a mark the gateway ignored would leave data in clear.
const SUBSCHEMA_KEYWORDS: &[&str] = &[
    "additionalItems",
    "additionalProperties",
    "allOf",
    "anyOf",
    "contains",
    "definitions",
    "dependencies",
    "dependentSchemas",
    "else",
    "if",
    "items",
    "not",
    "oneOf",
    "patternProperties",
    "prefixItems",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
    "$defs",
];

/// The keywords of [`SUBSCHEMA_KEYWORDS`] whose value maps names to schemas.
const SCHEMA_MAP_KEYWORDS: &[&str] = &[
    "definitions",
    "dependencies",
    "dependentSchemas",
    "patternProperties",
    "$defs",
];

/// The secret key of the hashes. Its `Debug` output never shows it.
#[derive(Clone)]
pub struct HashKey {
    /// HMAC-SHA256 with the key already absorbed; cloned for each hash.
    mac: Arc<Hmac<Sha256>>,
}

/// Why a hash key is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashKeyError {
    #[error(
        "the hash key is {0} bytes long; it must be at least {HASH_KEY_BYTES_MIN} (e.g. the 64 \
         characters of `openssl rand -hex 32`)"
    )]
    TooShort(usize),
}

impl HashKey {
    /// A key from its bytes (the configured text's bytes, as written).
    pub fn new(bytes: &[u8]) -> Result<HashKey, HashKeyError> {
        if bytes.len() < HASH_KEY_BYTES_MIN {
            return Err(HashKeyError::TooShort(bytes.len()));
        }
        let mac = Hmac::<Sha256>::new_from_slice(bytes)
            .expect("HMAC takes a key of any length; the length was checked above");
        Ok(HashKey { mac: Arc::new(mac) })
    }

    /// `"hmac-sha256:<64 hex>"`: the HMAC of the value's canonical JSON.
    pub fn hash_value(&self, value: &Value) -> String {
        let mut canonical = String::new();
        write_canonical(&mut canonical, value);
        let mut text = String::with_capacity(HASH_PREFIX.len() + 64);
        text.push_str(HASH_PREFIX);
        text.push_str(&self.hex(canonical.as_bytes()));
        text
    }

    /// The first [`KEY_HASH_HEX_LENGTH`] hex digits of the HMAC of `text`: what a key
    /// placeholder of a sensitive argument renders.
    pub fn key_part(&self, text: &str) -> String {
        let mut hex = self.hex(text.as_bytes());
        hex.truncate(KEY_HASH_HEX_LENGTH);
        hex
    }

    /// The HMAC of `bytes`, lowercase hex.
    fn hex(&self, bytes: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::clone(&self.mac);
        mac.update(bytes);
        crate::hex::lower_hex(&mac.finalize().into_bytes())
    }
}

impl fmt::Debug for HashKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HashKey(<redacted>)")
    }
}

/// Where an argument sits in the arguments object: `["to"]`, `["customer", "email"]`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ArgumentPath(Vec<String>);

impl ArgumentPath {
    pub fn new(segments: Vec<String>) -> ArgumentPath {
        ArgumentPath(segments)
    }

    pub fn segments(&self) -> &[String] {
        &self.0
    }

    /// True when this path is `other` or inside it.
    pub fn starts_with(&self, other: &[String]) -> bool {
        self.0.starts_with(other)
    }

    /// True when a value at `other` holds this argument or lies inside it: a template that
    /// renders `other` renders (part of) this argument.
    pub fn overlaps(&self, other: &[String]) -> bool {
        self.0.starts_with(other) || other.starts_with(&self.0)
    }
}

impl fmt::Display for ArgumentPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0.join("."))
    }
}

/// Why the `sensitive` marks of a schema can't be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SensitiveError {
    #[error(
        "`sensitive` at `{pointer}` is not on a property of the arguments; mark the property \
         itself (under `properties`, at the top level or inside an object property)"
    )]
    NotOnProperty { pointer: String },
    #[error("`sensitive` at `{pointer}` must be `true` or `false`")]
    NotBoolean { pointer: String },
}

/// The argument paths an input schema marks `sensitive: true`, sorted. A path inside another
/// marked path is left out (the outer value is hashed whole). A mark anywhere but on a
/// property is refused, so that no mark is silently ignored.
///
/// The walk follows the schema's own nesting, which the config parser bounds in depth.
pub fn sensitive_paths(schema: &Value) -> Result<Vec<ArgumentPath>, SensitiveError> {
    let mut paths = Vec::new();
    walk(schema, &mut String::new(), Some(&[]), &mut paths)?;
    paths.sort();
    let mut kept: Vec<ArgumentPath> = Vec::with_capacity(paths.len());
    for path in paths {
        // Sorted, so an enclosing path comes before the paths inside it.
        if !kept.iter().any(|outer| path.starts_with(outer.segments())) {
            kept.push(path);
        }
    }
    Ok(kept)
}

/// `schema` without its `sensitive` marks: the schema published to models and validated
/// against, which has no use for the gateway's own keyword.
pub fn without_marks(schema: &Value) -> Value {
    let mut schema = schema.clone();
    strip(&mut schema);
    schema
}

fn walk(
    node: &Value,
    pointer: &mut String,
    path: Option<&[String]>,
    out: &mut Vec<ArgumentPath>,
) -> Result<(), SensitiveError> {
    let Value::Object(members) = node else {
        return Ok(());
    };
    match members.get(SENSITIVE_KEYWORD) {
        None | Some(Value::Bool(false)) => {}
        Some(Value::Bool(true)) => match path {
            Some(path) if !path.is_empty() => out.push(ArgumentPath(path.to_vec())),
            _ => {
                return Err(SensitiveError::NotOnProperty {
                    pointer: pointer_or_root(pointer),
                });
            }
        },
        Some(_) => {
            return Err(SensitiveError::NotBoolean {
                pointer: pointer_or_root(pointer),
            });
        }
    }
    for (keyword, value) in members {
        let length = pointer.len();
        push_token(pointer, keyword);
        if keyword == "properties"
            && let Value::Object(properties) = value
        {
            for (name, property) in properties {
                let inner = pointer.len();
                push_token(pointer, name);
                let property_path = path.map(|path| {
                    let mut path = path.to_vec();
                    path.push(name.clone());
                    path
                });
                walk(property, pointer, property_path.as_deref(), out)?;
                pointer.truncate(inner);
            }
        } else if SUBSCHEMA_KEYWORDS.contains(&keyword.as_str()) {
            walk_subschemas(keyword, value, pointer, out)?;
        }
        pointer.truncate(length);
    }
    Ok(())
}

/// A subschema keyword's value: one schema, an array of them, or a map of names to them.
/// None of them is a property of the arguments.
fn walk_subschemas(
    keyword: &str,
    value: &Value,
    pointer: &mut String,
    out: &mut Vec<ArgumentPath>,
) -> Result<(), SensitiveError> {
    match value {
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                let length = pointer.len();
                push_token(pointer, &index.to_string());
                walk(item, pointer, None, out)?;
                pointer.truncate(length);
            }
        }
        Value::Object(members) if SCHEMA_MAP_KEYWORDS.contains(&keyword) => {
            for (name, member) in members {
                let length = pointer.len();
                push_token(pointer, name);
                walk(member, pointer, None, out)?;
                pointer.truncate(length);
            }
        }
        other => walk(other, pointer, None, out)?,
    }
    Ok(())
}

fn strip(node: &mut Value) {
    match node {
        Value::Object(members) => {
            members.remove(SENSITIVE_KEYWORD);
            for (keyword, value) in members.iter_mut() {
                let schema_map =
                    keyword == "properties" || SCHEMA_MAP_KEYWORDS.contains(&keyword.as_str());
                if schema_map {
                    if let Value::Object(schemas) = value {
                        schemas.values_mut().for_each(strip);
                    }
                } else if SUBSCHEMA_KEYWORDS.contains(&keyword.as_str()) {
                    strip(value);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(strip),
        _ => {}
    }
}

/// Appends one RFC 6901 token.
fn push_token(pointer: &mut String, token: &str) {
    pointer.push('/');
    pointer.push_str(&token.replace('~', "~0").replace('/', "~1"));
}

fn pointer_or_root(pointer: &str) -> String {
    if pointer.is_empty() {
        "/".to_owned()
    } else {
        pointer.to_owned()
    }
}

/// A tool's sensitive arguments with the key of their hashes: everything needed to turn
/// what a caller sent into what the ledger keeps.
#[derive(Debug, Clone, Copy)]
pub struct Redaction<'a> {
    pub paths: &'a [ArgumentPath],
    pub key: &'a HashKey,
}

impl Redaction<'_> {
    /// The arguments as the ledger keeps them: each sensitive value present replaced by its
    /// hash ([`HashKey::hash_value`]).
    pub fn arguments(&self, arguments: &Value) -> Value {
        let mut stored = arguments.clone();
        for path in self.paths {
            if let Some(slot) = member_mut(&mut stored, path.segments()) {
                *slot = Value::String(self.key.hash_value(slot));
            }
        }
        stored
    }

    /// A provider's answer as the ledger keeps it: every string or number whose hash is the
    /// hash of a sensitive argument of `stored_arguments` (already hashed, as the ledger
    /// keeps them) replaced by that hash. Works from the stored hashes alone, so the sweeper,
    /// which has no clear values, stores what a caller would.
    pub fn result(&self, result: Value, stored_arguments: &Value) -> Value {
        let hashes: HashSet<&str> = self
            .paths
            .iter()
            .filter_map(|path| member(stored_arguments, path.segments()))
            .filter_map(Value::as_str)
            .filter(|text| text.starts_with(HASH_PREFIX))
            .collect();
        if hashes.is_empty() {
            return result;
        }
        let mut result = result;
        scrub(&mut result, &hashes, self.key);
        result
    }
}

fn scrub(value: &mut Value, hashes: &HashSet<&str>, key: &HashKey) {
    match value {
        Value::String(_) | Value::Number(_) => {
            let hash = key.hash_value(value);
            if hashes.contains(hash.as_str()) {
                *value = Value::String(hash);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|item| scrub(item, hashes, key)),
        Value::Object(members) => members
            .values_mut()
            .for_each(|member| scrub(member, hashes, key)),
        Value::Bool(_) | Value::Null => {}
    }
}

fn member<'v>(value: &'v Value, path: &[String]) -> Option<&'v Value> {
    path.iter()
        .try_fold(value, |value, name| value.as_object()?.get(name))
}

fn member_mut<'v>(value: &'v mut Value, path: &[String]) -> Option<&'v mut Value> {
    path.iter()
        .try_fold(value, |value, name| value.as_object_mut()?.get_mut(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn key() -> HashKey {
        HashKey::new(&[7u8; 32]).unwrap()
    }

    #[test]
    fn the_hmac_is_rfc_4231_hmac_sha256() {
        // RFC 4231, test case 6: a key longer than SHA-256's block.
        let key = HashKey::new(&[0xaa; 131]).unwrap();
        assert_eq!(
            key.hex(b"Test Using Larger Than Block-Size Key - Hash Key First"),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_short_key_is_refused_and_no_key_is_ever_printed() {
        assert_eq!(
            HashKey::new(b"too short").unwrap_err(),
            HashKeyError::TooShort(9)
        );
        let key = HashKey::new(b"0123456789abcdef0123456789abcdef-secret").unwrap();
        assert_eq!(format!("{key:?}"), "HashKey(<redacted>)");
    }

    #[test]
    fn equal_values_hash_alike_and_the_hash_is_of_the_canonical_json() {
        let key = key();
        assert_eq!(key.hash_value(&json!(49)), key.hash_value(&json!(49.0)));
        assert_ne!(key.hash_value(&json!(49)), key.hash_value(&json!("49")));
        let hash = key.hash_value(&json!("a@example.com"));
        assert!(hash.starts_with(HASH_PREFIX) && hash.len() == HASH_PREFIX.len() + 64);
        assert_eq!(
            hash,
            format!("{HASH_PREFIX}{}", key.hex(b"\"a@example.com\""))
        );
        let other = HashKey::new(&[8u8; 32]).unwrap();
        assert_ne!(other.hash_value(&json!("a@example.com")), hash);
        assert_eq!(key.key_part("a@example.com").len(), KEY_HASH_HEX_LENGTH);
    }

    #[test]
    fn marks_are_found_on_properties_at_any_depth_and_stripped() {
        let schema = json!({"type": "object", "properties": {
            "to": {"type": "string", "sensitive": true},
            "reference": {"type": "string", "sensitive": false},
            "customer": {"type": "object", "properties": {
                "email": {"type": "string", "sensitive": true},
                "id": {"type": "string"}}},
            "card": {"type": "object", "sensitive": true, "properties": {
                "number": {"type": "string", "sensitive": true}}}}});
        let paths = sensitive_paths(&schema).unwrap();
        let shown: Vec<String> = paths.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["card", "customer.email", "to"]);
        let stripped = without_marks(&schema);
        assert!(!stripped.to_string().contains("sensitive"), "{stripped}");
        assert_eq!(stripped["properties"]["to"], json!({"type": "string"}));
    }

    #[test]
    fn a_mark_that_would_be_ignored_is_refused_with_where_it_is() {
        for (schema, pointer) in [
            (json!({"type": "object", "sensitive": true}), "/"),
            (
                json!({"type": "object", "properties": {"to": {"type": "array",
                    "items": {"type": "string", "sensitive": true}}}}),
                "/properties/to/items",
            ),
            (
                json!({"type": "object", "anyOf": [{"properties": {"to": {"sensitive": true}}}]}),
                "/anyOf/0/properties/to",
            ),
            (
                json!({"type": "object", "$defs": {"address": {"type": "string", "sensitive": true}}}),
                "/$defs/address",
            ),
            (
                json!({"type": "object", "$defs": {"a": {"properties": {"x": {"sensitive": true}}}}}),
                "/$defs/a/properties/x",
            ),
        ] {
            assert_eq!(
                sensitive_paths(&schema),
                Err(SensitiveError::NotOnProperty {
                    pointer: pointer.to_owned()
                }),
                "{schema}"
            );
        }
        assert_eq!(
            sensitive_paths(&json!({"type": "object", "properties": {"to": {"sensitive": "yes"}}})),
            Err(SensitiveError::NotBoolean {
                pointer: "/properties/to".to_owned()
            })
        );
        // A property named like a keyword is a property, and keeps its name when the marks
        // are stripped.
        let schema = json!({"type": "object", "properties": {
            "items": {"sensitive": true},
            "sensitive": {"type": "boolean"}}});
        assert_eq!(sensitive_paths(&schema).unwrap().len(), 1);
        assert_eq!(
            without_marks(&schema)["properties"],
            json!({"items": {}, "sensitive": {"type": "boolean"}})
        );
    }

    #[test]
    fn stored_arguments_hold_hashes_where_marked_and_nothing_else_changes() {
        let key = key();
        let paths = vec![
            ArgumentPath::new(vec!["to".into()]),
            ArgumentPath::new(vec!["customer".into(), "email".into()]),
        ];
        let redaction = Redaction {
            paths: &paths,
            key: &key,
        };
        let arguments = json!({"to": "a@example.com", "reference": "8812",
            "customer": {"email": "b@example.com", "id": "c1"}});
        let stored = redaction.arguments(&arguments);
        assert_eq!(stored["to"], json!(key.hash_value(&json!("a@example.com"))));
        assert_eq!(
            stored["customer"]["email"],
            json!(key.hash_value(&json!("b@example.com")))
        );
        assert_eq!(stored["reference"], "8812");
        assert_eq!(stored["customer"]["id"], "c1");
        // Absent optional arguments stay absent.
        assert_eq!(
            redaction.arguments(&json!({"reference": "1"})),
            json!({"reference": "1"})
        );
    }

    #[test]
    fn an_echo_of_a_sensitive_value_in_a_result_is_stored_as_its_hash() {
        let key = key();
        let paths = vec![ArgumentPath::new(vec!["to".into()])];
        let redaction = Redaction {
            paths: &paths,
            key: &key,
        };
        let stored = redaction.arguments(&json!({"to": "a@example.com", "reference": "8812"}));
        let result = json!({"id": "em_1", "to": "a@example.com", "reference": "8812",
            "list": ["a@example.com", 3]});
        let kept = redaction.result(result, &stored);
        assert_eq!(kept["to"], stored["to"]);
        assert_eq!(kept["list"][0], stored["to"]);
        assert_eq!(kept["reference"], "8812");
        assert_eq!(kept["id"], "em_1");
        assert!(!kept.to_string().contains("a@example.com"), "{kept}");
    }
}

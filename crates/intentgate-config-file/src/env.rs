//! `${NAME}` and `${NAME:-default}` references: secrets and per-deployment values from the
//! environment.
//!
//! References are resolved after parsing, and only where a secret belongs: the upstreams'
//! `base_url` and `headers` values, the tools' call/lookup/list `headers` values, and
//! `gateway.hash_key`.
//! Anywhere else `${...}` is ordinary text. The environment is an injected lookup, so tests
//! never touch the process environment.
//!
//! **Invariant:** a resolved value never appears in an error. Errors name the variable and
//! quote only the text written in the file.

use crate::limits::ENV_VALUE_BYTES_MAX;

/// Looks up an environment variable.
pub type Lookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Why a value could not be resolved. None of these holds a resolved value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvError {
    /// `${NAME}` with `NAME` unset and no default.
    Unset { name: String },
    /// `${` without its `}`, or a name that is not a variable name.
    Malformed {
        reference: String,
        reason: &'static str,
    },
    /// The value is longer than [`ENV_VALUE_BYTES_MAX`].
    TooLong { name: String, bytes: usize },
}

impl EnvError {
    /// The message and the fix, for a reference written in `field`.
    pub fn describe(&self, field: &str) -> (String, String) {
        match self {
            EnvError::Unset { name } => (
                format!("environment variable `{name}` (used in {field}) is not set"),
                format!("export {name}, or write ${{{name}:-value}}"),
            ),
            EnvError::Malformed { reference, reason } => (
                format!("`{reference}` in {field} is not a valid reference: {reason}"),
                "write ${NAME} or ${NAME:-default}, where NAME is letters, digits and `_`"
                    .to_owned(),
            ),
            EnvError::TooLong { name, bytes } => (
                format!(
                    "environment variable `{name}` (used in {field}) is {bytes} bytes long; \
                     the limit is {ENV_VALUE_BYTES_MAX}"
                ),
                format!("check that {name} holds the credential or URL meant here"),
            ),
        }
    }
}

/// One piece of a value: text as written, or a reference.
#[derive(Debug, PartialEq, Eq)]
enum Piece<'a> {
    Text(&'a str),
    Reference {
        name: &'a str,
        default: Option<&'a str>,
    },
}

fn pieces(text: &str) -> Result<Vec<Piece<'_>>, EnvError> {
    let mut pieces = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        if start > 0 {
            pieces.push(Piece::Text(&rest[..start]));
        }
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else {
            return Err(EnvError::Malformed {
                reference: rest[start..].chars().take(40).collect(),
                reason: "it has no closing `}`",
            });
        };
        let inner = &after[..end];
        let (name, default) = match inner.split_once(":-") {
            Some((name, default)) => (name, Some(default)),
            None => (inner, None),
        };
        let valid = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(EnvError::Malformed {
                reference: format!("${{{inner}}}"),
                reason: "a variable name is letters, digits and `_`, not starting with a digit",
            });
        }
        pieces.push(Piece::Reference { name, default });
        rest = &after[end + 1..];
    }
    if !rest.is_empty() {
        pieces.push(Piece::Text(rest));
    }
    Ok(pieces)
}

/// True when `text` holds a reference, so that its resolved form must be treated as secret.
pub fn has_reference(text: &str) -> bool {
    text.contains("${")
}

/// Replaces every reference. An empty or unset variable with a default gets the default
/// (as in a POSIX shell's `${NAME:-default}`); an unset one without a default is an error.
pub fn resolve(text: &str, lookup: Lookup<'_>) -> Result<String, EnvError> {
    let mut resolved = String::with_capacity(text.len());
    for piece in pieces(text)? {
        match piece {
            Piece::Text(text) => resolved.push_str(text),
            Piece::Reference { name, default } => {
                let value = match (lookup(name), default) {
                    (Some(value), Some(default)) if value.is_empty() => default.to_owned(),
                    (Some(value), _) => value,
                    (None, Some(default)) => default.to_owned(),
                    (None, None) => {
                        return Err(EnvError::Unset {
                            name: name.to_owned(),
                        });
                    }
                };
                if value.len() > ENV_VALUE_BYTES_MAX {
                    return Err(EnvError::TooLong {
                        name: name.to_owned(),
                        bytes: value.len(),
                    });
                }
                resolved.push_str(&value);
            }
        }
    }
    Ok(resolved)
}

/// The text with every reference removed, for checks of the text around them (a header
/// template's placeholders), which must never see a secret. A malformed reference is
/// reported by [`resolve`]; here the text is returned as written.
pub fn without_references(text: &str) -> String {
    match pieces(text) {
        Ok(pieces) => pieces
            .into_iter()
            .filter_map(|piece| match piece {
                Piece::Text(text) => Some(text),
                Piece::Reference { .. } => None,
            })
            .collect(),
        Err(_) => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "KEY" => Some("sk_live_secret".to_owned()),
            "EMPTY" => Some(String::new()),
            _ => None,
        }
    }

    #[test]
    fn references_resolve_with_defaults_like_a_shell() {
        assert_eq!(
            resolve("Bearer ${KEY}", &env).unwrap(),
            "Bearer sk_live_secret"
        );
        assert_eq!(resolve("${MISSING:-http://x}", &env).unwrap(), "http://x");
        assert_eq!(resolve("${EMPTY:-d}", &env).unwrap(), "d");
        assert_eq!(resolve("a${EMPTY}b", &env).unwrap(), "ab");
        assert_eq!(resolve("${KEY:-d}", &env).unwrap(), "sk_live_secret");
        assert_eq!(resolve("no references", &env).unwrap(), "no references");
    }

    #[test]
    fn errors_name_the_variable_never_a_value() {
        assert_eq!(
            resolve("Bearer ${MISSING}", &env),
            Err(EnvError::Unset {
                name: "MISSING".into()
            })
        );
        let (message, fix) = EnvError::Unset {
            name: "PAYMENTS_API_KEY".into(),
        }
        .describe("the header");
        assert!(message.contains("PAYMENTS_API_KEY"), "{message}");
        assert_eq!(
            fix,
            "export PAYMENTS_API_KEY, or write ${PAYMENTS_API_KEY:-value}"
        );
        assert!(matches!(
            resolve("${KEY", &env),
            Err(EnvError::Malformed { .. })
        ));
        assert!(matches!(
            resolve("${1X}", &env),
            Err(EnvError::Malformed { .. })
        ));
        let long = |_: &str| Some("x".repeat(ENV_VALUE_BYTES_MAX + 1));
        assert!(matches!(
            resolve("${A}", &long),
            Err(EnvError::TooLong { .. })
        ));
    }

    #[test]
    fn references_can_be_removed_for_template_checks() {
        assert_eq!(without_references("Bearer ${KEY:-x}"), "Bearer ");
        assert_eq!(without_references("{order_id}-${KEY}"), "{order_id}-");
    }
}

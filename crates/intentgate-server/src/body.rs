//! Request bodies read as JSON, the same way on every route of the API and of the admin API:
//! 413 over the route's limit, 400 `malformed-json` when the body is not JSON, and 422
//! `invalid-body` when it is JSON of the wrong shape (a field missing, unknown or of the
//! wrong type), the detail naming what is wrong and the shape the route reads.

use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::problem::Problem;

/// The body as `T`, or 413 saying `too_large` over the limit; then [`parse`].
pub fn json<T: DeserializeOwned>(
    body: Result<Bytes, BytesRejection>,
    too_large: impl Into<String>,
    shape: &str,
) -> Result<T, Problem> {
    let body = body.map_err(|rejection| Problem::unreadable_body(rejection, too_large))?;
    parse(&body, shape)
}

/// The body's bytes, or 413 when it is over `limit_bytes`, with `advice` (or the
/// rejection's own problem). The message is only written for a refused body.
pub fn read(
    body: Result<Bytes, BytesRejection>,
    limit_bytes: usize,
    advice: &str,
) -> Result<Bytes, Problem> {
    body.map_err(|rejection| {
        let too_large = format!("the body is over {limit_bytes} bytes; {advice}");
        Problem::unreadable_body(rejection, too_large)
    })
}

/// `body` as `T`: 400 when it is not JSON, 422 when it is JSON of another shape, saying the
/// shape (`shape`, written as an example: `{"arguments": {...}}`).
///
/// A JSON object of the shape is read straight into `T`; anything else is read again
/// through a [`Value`], which tells the two errors apart.
pub fn parse<T: DeserializeOwned>(body: &[u8], shape: &str) -> Result<T, Problem> {
    // A struct also reads from an array (`[{}]`): only an object takes the direct way.
    let object = body.trim_ascii_start().first() == Some(&b'{');
    if object && let Ok(parsed) = serde_json::from_slice(body) {
        return Ok(parsed);
    }
    let value: Value = serde_json::from_slice(body).map_err(|error| {
        Problem::malformed_json(format!(
            "the body is not JSON ({error}); it must be {shape}"
        ))
    })?;
    // Every body is an object: serde would read a struct from an array too, by position.
    if !value.is_object() {
        return Err(Problem::invalid_body(format!(
            "the body must be a JSON object: {shape}"
        )));
    }
    serde_json::from_value(value)
        .map_err(|error| Problem::invalid_body(format!("{error}; the body must be {shape}")))
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Call {
        arguments: Value,
    }

    const SHAPE: &str = "{\"arguments\": {...}}";

    #[test]
    fn not_json_is_400_and_every_wrong_shape_is_one_422_kind() {
        let problem = parse::<Call>(b"{\"arguments\":", SHAPE).unwrap_err();
        assert_eq!(
            (problem.status, problem.kind),
            (StatusCode::BAD_REQUEST, "malformed-json")
        );
        for (body, says) in [
            ("{}", "missing field `arguments`"),
            ("{\"args\": {}}", "unknown field `args`"),
            ("[1, 2]", "a JSON object"),
            ("[{}]", "a JSON object"),
        ] {
            let problem = parse::<Call>(body.as_bytes(), SHAPE).unwrap_err();
            assert_eq!(problem.status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
            assert_eq!(problem.kind, "invalid-body", "{body}");
            assert!(problem.detail.contains(says), "{}", problem.detail);
            assert!(problem.detail.ends_with(SHAPE), "{}", problem.detail);
        }
        assert!(parse::<Call>(b"{\"arguments\": {}}", SHAPE).is_ok());
    }

    /// An object read straight into the struct is what reading it through a `Value` gives:
    /// numbers as their text, the last of two same-named members, and a member named twice
    /// at the top (which the struct alone refuses) read the slower way, as before.
    #[test]
    fn an_object_read_directly_is_what_a_value_would_give() {
        for body in [
            r#"{"arguments": {"amount": 49.10, "big": 1e400, "n": 12345678901234567890123}}"#,
            r#" {"arguments": {"a": 1, "a": 2}}"#,
            r#"{"arguments": {"x": 1}, "arguments": {"y": 2}}"#,
            "\n\t{\"arguments\": [\"\\u00e9\", null, true]}",
        ] {
            let through_value: Value = serde_json::from_str(body).unwrap();
            let expected = through_value["arguments"].clone();
            let parsed = parse::<Call>(body.as_bytes(), SHAPE).expect(body);
            assert_eq!(parsed.arguments, expected, "{body}");
            assert_eq!(parsed.arguments.to_string(), expected.to_string(), "{body}");
        }
    }
}

//! The bearer token in front of every admin route.
//!
//! The presented token and the configured one are both hashed (SHA-256) and the digests
//! compared without an early exit, so the time taken says nothing about how much of a guess
//! was right, nor about the token's length. The token is never logged.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use intentgate_server::Problem;
use sha2::{Digest, Sha256};

use crate::{AdminState, TOKEN_ENV};

pub(crate) fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// True when the two digests are equal, comparing every byte whatever the first difference.
fn same(left: &[u8; 32], right: &[u8; 32]) -> bool {
    let difference = left
        .iter()
        .zip(right.iter())
        .fold(0u8, |difference, (a, b)| difference | (a ^ b));
    std::hint::black_box(difference) == 0
}

/// The token of an `Authorization: Bearer <token>` header (the scheme in any case).
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// Lets the request through when it carries the admin token; answers 401 otherwise.
pub(crate) async fn require_token(
    State(state): State<Arc<AdminState>>,
    request: Request,
    next: Next,
) -> Response {
    let presented = bearer(request.headers());
    match presented {
        Some(token) if same(&digest(token), &state.token_digest) => next.run(request).await,
        Some(_) => {
            tracing::warn!(
                path = request.uri().path(),
                "admin request with a wrong token refused"
            );
            unauthorized(
                "the bearer token is not this gateway's admin token; send the token it was \
started with",
                Some("invalid_token"),
            )
        }
        None => unauthorized(
            &format!(
                "the admin API needs the header `Authorization: Bearer <token>`, with the token \
the gateway was started with ({TOKEN_ENV} or --admin-token)"
            ),
            None,
        ),
    }
}

fn unauthorized(detail: &str, error: Option<&str>) -> Response {
    let mut response = Problem::new(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "Admin token required",
        detail,
    )
    .into_response();
    // RFC 6750: the scheme, and for a token that was sent but is wrong, the error code.
    let challenge = match error {
        Some(error) => format!("Bearer realm=\"intentgate-admin\", error=\"{error}\""),
        None => "Bearer realm=\"intentgate-admin\"".to_owned(),
    };
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_same_token_matches() {
        let token = digest("a-long-admin-token-0123");
        assert!(same(&digest("a-long-admin-token-0123"), &token));
        assert!(!same(&digest("a-long-admin-token-0124"), &token));
        assert!(!same(&digest(""), &token));
    }

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer abc"),
        );
        assert_eq!(bearer(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&headers), None);
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer "));
        assert_eq!(bearer(&headers), None);
    }
}

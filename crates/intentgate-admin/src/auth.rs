//! The bearer token in front of every admin route, or a principal with the `admin` scope,
//! or a signed-in console user ([`ConsoleUser`]).
//!
//! The presented token and the configured one are both hashed (SHA-256) and the digests
//! compared without an early exit, so the time taken says nothing about how much of a guess
//! was right, nor about the token's length. The token is never logged. Wrong tokens are
//! counted per source address (`throttle.rs`): a source past the limit gets 429 for the rest
//! of the window, whatever it sends.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use intentgate_core::{Principal, Scope};
use intentgate_server::Problem;
use sha2::{Digest, Sha256};

use crate::throttle::{Refused, Source};
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

/// The token of an `Authorization: Bearer <token>` header, as the server's edge reads it; a
/// header of another shape counts as none.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    intentgate_server::auth::bearer(headers).ok().flatten()
}

/// An operator signed in to the console. Only the console's session layer inserts it into a
/// request, after finding the request's session cookie among its live sessions and, for a
/// request that changes something, checking the session's CSRF token and the request's
/// origin; a client can't set request extensions. The admin API lets such a request in and
/// records what it changes under `actor`, whatever actor its body names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleUser {
    /// Who signed in, as the event log and flags record it (`console:<subject>`).
    pub actor: String,
}

/// Lets the request through when it carries the admin token, a principal with the `admin`
/// scope or a console user; answers 401 otherwise, and 429 to a source that sent too many
/// wrong tokens.
pub(crate) async fn require_token(
    State(state): State<Arc<AdminState>>,
    request: Request,
    next: Next,
) -> Response {
    if request.extensions().get::<ConsoleUser>().is_some() {
        return next.run(request).await;
    }
    match credential(&state, &request) {
        Ok(_) => next.run(request).await,
        Err(response) => *response,
    }
}

/// The subject of the request's admin credential: `admin-token` for the token, the
/// principal's subject for a credential with the `admin` scope; otherwise the 401 (or 429)
/// to answer. Wrong tokens are counted against the source address.
pub(crate) fn credential(state: &AdminState, request: &Request) -> Result<String, Box<Response>> {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| *peer);
    // The server's edge authenticated the caller: a credential with the `admin` scope needs no
    // admin token.
    let admin_principal = request
        .extensions()
        .get::<Principal>()
        .filter(|principal| principal.scopes.contains(Scope::Admin));
    if state.admin_scope
        && let Some(principal) = admin_principal
    {
        return Ok(principal.subject.clone());
    }
    let source = Source::of(peer);
    let now = Instant::now();
    if let Err(refused) = state.throttle.check(source, now) {
        return Err(Box::new(too_many_failures(state, refused)));
    }
    let presented = bearer(request.headers());
    match presented {
        Some(token)
            if state
                .token_digest
                .is_some_and(|expected| same(&digest(token), &expected)) =>
        {
            state.throttle.succeeded(source);
            Ok(TOKEN_SUBJECT.to_owned())
        }
        Some(_) => {
            tracing::warn!(
                path = request.uri().path(),
                %source,
                "admin request with a wrong token refused"
            );
            if let Some(refused) = state.throttle.failed(source, now) {
                tracing::warn!(
                    %source,
                    failures = state.throttle.limit().failures,
                    refused_for_s = retry_after_seconds(refused.retry_after),
                    "too many wrong admin tokens from one source; refusing every admin request from it for the rest of the window"
                );
            }
            Err(Box::new(unauthorized(
                "the bearer token is not this gateway's admin token; send the token it was \
started with",
                Some("invalid_token"),
            )))
        }
        None => Err(Box::new(unauthorized(
            &format!(
                "the admin API needs the header `Authorization: Bearer <token>`, with the token \
the gateway was started with ({TOKEN_ENV} or --admin-token)"
            ),
            None,
        ))),
    }
}

/// The subject of a request that carried the admin token: the token names nobody.
pub(crate) const TOKEN_SUBJECT: &str = "admin-token";

/// Whole seconds to wait, rounded up, at least 1 (a `Retry-After` of 0 invites a retry at once).
fn retry_after_seconds(wait: Duration) -> u64 {
    let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    seconds.max(1)
}

fn too_many_failures(state: &AdminState, refused: Refused) -> Response {
    let limit = state.throttle.limit();
    let seconds = retry_after_seconds(refused.retry_after);
    let mut response = Problem::new(
        StatusCode::TOO_MANY_REQUESTS,
        "too-many-failures",
        "Too many failed admin authentications",
        format!(
            "this address sent {} wrong admin tokens within {} s, so every admin request from it \
is refused for {seconds} s more; then send the token the gateway was started with",
            limit.failures,
            limit.window.as_secs()
        ),
    )
    .into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    response
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
    fn retry_after_is_whole_seconds_rounded_up_and_never_zero() {
        assert_eq!(retry_after_seconds(Duration::from_millis(59_001)), 60);
        assert_eq!(retry_after_seconds(Duration::from_secs(7)), 7);
        assert_eq!(retry_after_seconds(Duration::ZERO), 1);
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

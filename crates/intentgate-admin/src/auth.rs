//! The bearer token in front of every admin route, or a principal with the `admin` scope,
//! or a signed-in console user ([`ConsoleUser`]); and in front of the approvals routes, the
//! same or a principal with the `approve` scope ([`require_access`]).
//!
//! The presented token and the configured one are both hashed (SHA-256) and the digests
//! compared without an early exit, so the time taken says nothing about how much of a guess
//! was right, nor about the token's length. The token is never logged. The right token is
//! always let in, and a valid credential without the `admin` scope is a 403; only wrong
//! tokens are counted per source address (`throttle.rs`, `client.rs`): a source past the
//! limit gets 429 for its wrong tokens for the rest of the window.

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

use crate::client::client_address;
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
    /// Who decides on held intents in this session: set only when the credential it signed
    /// in with had the `approve` scope ([`Approver::of`]); the admin token names nobody and
    /// never sets it.
    pub approver: Option<Approver>,
}

/// Who may approve or deny held intents (docs/design.md section 13): the subject and tenant
/// of a credential with the `approve` scope, which `admin` does not include. A decision is
/// recorded under `subject` (so that the ledger can refuse the subject that asked) and only
/// on the intents of `tenant`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approver {
    /// The credential's subject, as the ledger records who asked and who decided.
    pub subject: String,
    /// The only tenant whose held intents it may decide on.
    pub tenant: String,
}

impl Approver {
    /// The approver the principal is, when it has the `approve` scope (granted by name).
    pub fn of(principal: &Principal) -> Option<Approver> {
        principal.may(Scope::Approve).then(|| Approver {
            subject: principal.subject.clone(),
            tenant: principal.tenant.as_str().to_owned(),
        })
    }

    /// The approver of the request's principal (set by the server's edge), if any.
    pub fn of_request(request: &Request) -> Option<Approver> {
        request
            .extensions()
            .get::<Principal>()
            .and_then(Approver::of)
    }
}

/// What a request to the approvals routes may do, decided by [`require_access`] before
/// anything of the request is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Access {
    /// May read every tenant's held intents: the admin token, a credential with the `admin`
    /// scope (where the admin API takes them) or a console user.
    pub admin: bool,
    /// May decide, on its own tenant's held intents; may read those too.
    pub approver: Option<Approver>,
}

/// Lets a request to the approvals routes through with its [`Access`] (in its extensions):
/// a console user, the admin token, a principal with the `admin` scope or one with the
/// `approve` scope. Answers 403 to a valid credential with neither scope, 401 without a
/// credential, and 429 to wrong tokens from a source that sent too many of them, as
/// [`require_token`] does.
pub(crate) async fn require_access(
    State(state): State<Arc<AdminState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let access = if let Some(user) = request.extensions().get::<ConsoleUser>() {
        Access {
            admin: true,
            approver: user.approver.clone(),
        }
    } else if let Some(approver) = Approver::of_request(&request) {
        let admin = request
            .extensions()
            .get::<Principal>()
            .is_some_and(|principal| state.admin_scope && principal.scopes.contains(Scope::Admin));
        Access {
            admin,
            approver: Some(approver),
        }
    } else {
        match credential(&state, &request) {
            Ok(_) => Access {
                admin: true,
                approver: None,
            },
            Err(response) => match request.extensions().get::<Principal>() {
                Some(principal) => return lacks_approvals_scope(principal),
                None => return *response,
            },
        }
    };
    request.extensions_mut().insert(access);
    next.run(request).await
}

/// The 403 of the approvals routes for a credential the edge accepted with neither the
/// `approve` nor the `admin` scope.
fn lacks_approvals_scope(principal: &Principal) -> Response {
    let has = if principal.scopes.is_empty() {
        "none".to_owned()
    } else {
        format!("`{}`", principal.scopes)
    };
    Problem::new(
        StatusCode::FORBIDDEN,
        "missing-scope",
        "Missing scope",
        format!(
            "the credential of `{}` is valid but has neither the `approve` scope (to read and \
decide on its own tenant's held intents) nor the `admin` scope (to read every tenant's); it \
has {has}: use a credential with the `approve` scope",
            principal.subject
        ),
    )
    .into_response()
}

/// Lets the request through when it carries the admin token, a principal with the `admin`
/// scope or a console user; answers 403 to a valid credential without the scope, 401
/// otherwise, and 429 to wrong tokens from a source that sent too many of them.
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
/// principal's subject for a credential with the `admin` scope; otherwise the 403, 401 or
/// 429 to answer.
///
/// The right token is checked first and always let in, and a credential the server's edge
/// accepted is judged by its scope alone: only wrong tokens are counted against their source,
/// so no stranger (sharing a proxy's address, or sending a tenant's valid key) can lock the
/// operator out of the admin API, the console or the kill switch.
pub(crate) fn credential(state: &AdminState, request: &Request) -> Result<String, Box<Response>> {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(peer)| peer.ip());
    let source = Source::of(client_address(
        peer,
        request.headers(),
        &state.trusted_proxies,
    ));
    let presented = bearer(request.headers());
    if let Some(token) = presented
        && state
            .token_digest
            .is_some_and(|expected| same(&digest(token), &expected))
    {
        state.throttle.succeeded(source);
        return Ok(TOKEN_SUBJECT.to_owned());
    }
    // The server's edge authenticated the caller's credential (it inserts no principal for
    // `auth: none`, where a principal proves nothing).
    if let Some(principal) = request.extensions().get::<Principal>() {
        if state.admin_scope && principal.scopes.contains(Scope::Admin) {
            return Ok(principal.subject.clone());
        }
        return Err(Box::new(lacks_admin_scope(state, principal)));
    }
    let Some(_) = presented else {
        return Err(Box::new(unauthorized(
            &format!(
                "the admin API needs the header `Authorization: Bearer <token>`, with the token \
the gateway was started with ({TOKEN_ENV} or --admin-token)"
            ),
            None,
        )));
    };
    let now = Instant::now();
    if let Err(refused) = state.throttle.check(source, now) {
        return Err(Box::new(too_many_failures(state, refused)));
    }
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
            "too many wrong admin tokens from one source; answering its wrong tokens 429 \
        without logging each for the rest of the window (the right token still works)"
        );
    }
    Err(Box::new(unauthorized(
        "the bearer token is not this gateway's admin token; send the token it was \
started with",
        Some("invalid_token"),
    )))
}

/// The 403 for a credential the edge accepted that lacks the `admin` scope: it proved who
/// the caller is, so it is not a guess at the token and is not counted as one.
fn lacks_admin_scope(state: &AdminState, principal: &Principal) -> Response {
    let has = if principal.scopes.is_empty() {
        "none".to_owned()
    } else {
        format!("`{}`", principal.scopes)
    };
    let how = if state.admin_scope {
        "send the admin token, or use a credential with the `admin` scope"
    } else {
        "this gateway's admin API takes only the admin token: send it"
    };
    Problem::new(
        StatusCode::FORBIDDEN,
        "missing-scope",
        "Missing scope",
        format!(
            "the credential of `{}` is valid but lacks the `admin` scope (it has {has}); \
the admin API is for operators: {how}",
            principal.subject
        ),
    )
    .into_response()
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
            "this address sent {} wrong admin tokens within {} s, so its wrong tokens are \
refused for {seconds} s more; send the token the gateway was started with (it is always \
accepted)",
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

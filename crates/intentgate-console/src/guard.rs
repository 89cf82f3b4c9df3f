//! The console's session in front of the admin API, and the checks a cookie-authenticated
//! change must pass.
//!
//! A cookie is sent by the browser whoever made the page that sends the request, so for a
//! request that changes something (any method but GET, HEAD and OPTIONS) the cookie alone
//! proves nothing. Such a request must also carry, in [`CSRF_HEADER`], the session's CSRF
//! token (which only the console's own pages know: it is in the page, and no other origin
//! can read the page), an `Origin` that names this very server, and, where the browser sends
//! one, `Sec-Fetch-Site: same-origin`. The edge already refused other origins and non-JSON
//! bodies, and `SameSite=Strict` keeps the cookie off cross-site requests; each check holds
//! on its own should another fail.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use intentgate_admin::ConsoleUser;
use intentgate_server::Problem;

use crate::Shared;
use crate::session::{Session, now_ms, same_secret};

/// The session cookie. The `__Host-` prefix makes browsers refuse it unless it is `Secure`,
/// has `Path=/` and no `Domain`, so no sibling host name can set or shadow it.
pub const SESSION_COOKIE: &str = "__Host-intentgate-console";
/// The header that carries a session's CSRF token on every change.
pub const CSRF_HEADER: &str = "x-intentgate-csrf";
/// Length of a session id as the cookie carries it: 32 bytes as hex.
const SESSION_ID_LENGTH: usize = 64;

/// The session id in the request's cookie, if it has one of the right shape.
pub(crate) fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|value| value.to_str().ok())
        .flat_map(|value| value.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == SESSION_COOKIE)
        .map(|(_, value)| value.trim())
        .filter(|value| {
            value.len() == SESSION_ID_LENGTH && value.bytes().all(|b| b.is_ascii_hexdigit())
        })
}

/// The live session of the request's cookie: `Ok(None)` without one; an error (a 503 to
/// answer) when the ledger could not be read.
pub(crate) async fn session_of(
    shared: &Shared,
    headers: &HeaderMap,
) -> Result<Option<(String, Session)>, Problem> {
    let Some(id) = session_cookie(headers) else {
        return Ok(None);
    };
    match shared.sessions.find(id, now_ms()).await {
        Ok(found) => Ok(found.map(|session| (id.to_owned(), session))),
        Err(error) => {
            tracing::error!(%error, "the console session could not be read from the ledger");
            Err(ledger_unavailable())
        }
    }
}

/// The answer when the ledger that keeps the sessions could not be reached.
pub(crate) fn ledger_unavailable() -> Problem {
    Problem::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "ledger-unavailable",
        "Sessions can't be read",
        "the ledger that keeps the console's sessions could not be reached; try again, and \
see the gateway's log",
    )
}

/// True for the methods that change nothing.
pub(crate) fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The request comes from a page of this server: an `Origin` naming the host the request
/// was sent to, and no `Sec-Fetch-Site` other than `same-origin`. For the sign-in, and with
/// the CSRF token for every change.
pub(crate) fn check_same_origin(headers: &HeaderMap) -> Result<(), Problem> {
    if let Some(site) = headers.get("sec-fetch-site")
        && site.as_bytes() != b"same-origin"
    {
        return Err(forbidden(format!(
            "the browser says this request comes from another site (Sec-Fetch-Site: {}); the \
console accepts changes only from its own pages",
            String::from_utf8_lossy(site.as_bytes())
        )));
    }
    let origin = headers
        .get(header::ORIGIN)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    if !intentgate_server::edge::same_origin(origin.trim().trim_end_matches('/'), headers) {
        return Err(forbidden(
            "a change made with the console's session must come from the console's own page \
(an Origin header naming this server); reload the console and try again"
                .to_owned(),
        ));
    }
    Ok(())
}

/// The checks of a change made with a session: same origin, and the session's CSRF token.
pub(crate) fn check_change(headers: &HeaderMap, session: &Session) -> Result<(), Problem> {
    check_same_origin(headers)?;
    let presented = headers
        .get(CSRF_HEADER)
        .and_then(|value| value.to_str().ok())
        .unwrap_or("");
    if presented.is_empty() || !same_secret(presented, &session.csrf) {
        return Err(forbidden(format!(
            "a change made with the console's session needs the session's CSRF token in the \
{CSRF_HEADER} header; reload the console and try again"
        )));
    }
    Ok(())
}

fn forbidden(detail: String) -> Problem {
    Problem::new(
        StatusCode::FORBIDDEN,
        "csrf",
        "Cross-site request refused",
        detail,
    )
}

/// The admin API's layer: a request with a live session's cookie (and no `Authorization`
/// header) goes on as that session's [`ConsoleUser`], once a change has passed
/// [`check_change`]. Anything else goes on untouched, to the admin API's own checks.
pub(crate) async fn admin_session(
    State(shared): State<Arc<Shared>>,
    mut request: Request,
    next: Next,
) -> Response {
    if request.headers().contains_key(header::AUTHORIZATION) {
        return next.run(request).await;
    }
    let session = match session_of(&shared, request.headers()).await {
        Ok(Some((_, session))) => session,
        Ok(None) => return next.run(request).await,
        Err(problem) => return private(problem.into_response()),
    };
    if !is_safe(request.method())
        && let Err(problem) = check_change(request.headers(), &session)
    {
        tracing::warn!(
            path = request.uri().path(),
            actor = %session.actor,
            "console change refused: it did not come from the console's own page"
        );
        return private(problem.into_response());
    }
    request.extensions_mut().insert(ConsoleUser {
        actor: session.actor,
        approver: session.approver,
    });
    private(next.run(request).await)
}

/// An answer for a signed-in browser: never stored by a cache, never sniffed.
pub(crate) fn private(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_static(value));
        }
        headers
    }

    #[test]
    fn the_session_cookie_is_found_among_others_and_only_in_its_shape() {
        let id = "ab".repeat(32);
        let text = format!("theme=dark; {SESSION_COOKIE}={id}; other=1");
        let mut map = HeaderMap::new();
        map.insert(header::COOKIE, HeaderValue::from_str(&text).unwrap());
        assert_eq!(session_cookie(&map), Some(id.as_str()));
        for bad in [
            format!("{SESSION_COOKIE}=short"),
            format!("{SESSION_COOKIE}={}", "zz".repeat(32)),
            format!("intentgate-console={id}"),
        ] {
            let mut map = HeaderMap::new();
            map.insert(header::COOKIE, HeaderValue::from_str(&bad).unwrap());
            assert_eq!(session_cookie(&map), None, "{bad}");
        }
    }

    #[test]
    fn a_change_needs_the_token_its_own_origin_and_no_cross_site_fetch() {
        let session = Session {
            actor: "console:ops".to_owned(),
            csrf: "t0ken".to_owned(),
            approver: None,
        };
        let good = [
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin"),
            (CSRF_HEADER, "t0ken"),
        ];
        assert!(check_change(&headers(&good), &session).is_ok());
        // Without Sec-Fetch-Site (an older browser) the other checks suffice.
        assert!(check_change(&headers(&[good[0], good[1], good[3]]), &session).is_ok());
        let refused: [&[(&str, &str)]; 5] = [
            &[good[0], good[1], good[2]],
            &[good[0], good[1], good[2], (CSRF_HEADER, "t0kem")],
            &[good[0], good[2], good[3]],
            &[good[0], ("origin", "http://evil.example"), good[2], good[3]],
            &[good[0], good[1], ("sec-fetch-site", "cross-site"), good[3]],
        ];
        for pairs in refused {
            assert!(
                check_change(&headers(pairs), &session).is_err(),
                "{pairs:?}"
            );
        }
    }
}

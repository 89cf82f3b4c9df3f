//! The console's pages and assets, embedded in the binary (no CDN, no build step: it works
//! offline), and the headers every console response carries.
//!
//! Every page path serves one of two documents: the console (with a live session) or the
//! sign-in form (without). The console's script (`console.js`) draws the page the path names
//! from the admin API's answers; the session's CSRF token and actor reach it in `<meta>`
//! elements of the document, which only this origin can read.

use std::sync::Arc;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse, Response};
use intentgate_server::Problem;

use crate::Shared;
use crate::guard::session_of;

/// The console's page, with `{{csrf}}`, `{{actor}}` and `{{approver_tenant}}` (empty for a
/// session that can't decide on held intents) to fill in.
const APP_HTML: &str = include_str!("../assets/app.html");
/// The sign-in form.
const SIGN_IN_HTML: &str = include_str!("../assets/sign-in.html");

/// The embedded assets: name, content type, content.
const ASSETS: [(&str, &str, &[u8]); 4] = [
    (
        "console.css",
        "text/css; charset=utf-8",
        include_bytes!("../assets/console.css"),
    ),
    (
        "console.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/console.js"),
    ),
    (
        "sign-in.js",
        "text/javascript; charset=utf-8",
        include_bytes!("../assets/sign-in.js"),
    ),
    (
        "icon.svg",
        "image/svg+xml",
        include_bytes!("../assets/icon.svg"),
    ),
];

/// What a console page may load: only this server's own scripts, styles and images (no
/// inline script or style, nothing from elsewhere), talk only to this server, post forms
/// only here, and be framed by nobody.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; \
style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; \
frame-ancestors 'none'; base-uri 'none'; object-src 'none'";

/// `GET /console` and every page under it: the console with a live session, the sign-in
/// form without.
pub(crate) async fn page(State(shared): State<Arc<Shared>>, headers: HeaderMap) -> Response {
    match session_of(&shared, &headers).await {
        Err(problem) => problem.into_response(),
        Ok(Some((_, session))) => Html(
            APP_HTML
                .replace("{{csrf}}", &escape(&session.csrf))
                .replace("{{actor}}", &escape(&session.actor))
                .replace(
                    "{{approver_tenant}}",
                    &escape(
                        session
                            .approver
                            .as_ref()
                            .map_or("", |approver| approver.tenant.as_str()),
                    ),
                ),
        )
        .into_response(),
        Ok(None) => Html(SIGN_IN_HTML).into_response(),
    }
}

/// `GET /console/assets/{file}`.
pub(crate) async fn asset(Path(file): Path<String>) -> Response {
    let Some((_, content_type, content)) = ASSETS.iter().find(|(name, _, _)| *name == file) else {
        return Problem::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "No such asset",
            "the console's assets are console.css, console.js, sign-in.js and icon.svg",
        )
        .into_response();
    };
    let mut response = content.to_vec().into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    // Assets hold no data: a browser may keep them, but asks again after an upgrade.
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// HTML-escapes a value written into the page.
fn escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for character in text.chars() {
        match character {
            '&' => escaped.push_str("&amp;"),
            '<' => escaped.push_str("&lt;"),
            '>' => escaped.push_str("&gt;"),
            '"' => escaped.push_str("&quot;"),
            '\'' => escaped.push_str("&#39;"),
            other => escaped.push(other),
        }
    }
    escaped
}

/// The headers of every console response; pages and data are never cached.
pub(crate) async fn strict_headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let fixed = [
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY")),
        (
            header::HeaderName::from_static("cross-origin-opener-policy"),
            HeaderValue::from_static("same-origin"),
        ),
        (
            header::HeaderName::from_static("cross-origin-resource-policy"),
            HeaderValue::from_static("same-origin"),
        ),
    ];
    for (name, value) in fixed {
        headers.insert(name, value);
    }
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_written_into_the_page_are_escaped() {
        assert_eq!(
            escape(r#"<script>"x" & 'y'</script>"#),
            "&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;&lt;/script&gt;"
        );
    }

    #[test]
    fn the_pages_name_their_placeholders_and_load_only_embedded_assets() {
        assert!(APP_HTML.contains("{{csrf}}") && APP_HTML.contains("{{actor}}"));
        assert!(APP_HTML.contains("{{approver_tenant}}"));
        for page in [APP_HTML, SIGN_IN_HTML] {
            assert!(!page.contains("http://") && !page.contains("https://"));
            assert!(!page.contains("<script>") && !page.contains("style="));
        }
    }
}

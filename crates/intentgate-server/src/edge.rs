//! The checks every request passes before any handler: the browser checks, then who is
//! calling.
//!
//! Browser checks. A web page the operator happens to visit can send requests to a gateway on
//! loopback: a form posts `text/plain` without a preflight, and a DNS-rebinding page reaches
//! `127.0.0.1` under its own host name. So on every route: a request with an `Origin` that
//! is not listed in `allowed_origins` is refused (403), a POST, PUT or PATCH must be
//! `application/json` (415: a browser can't send that cross-origin without a preflight that
//! this server never approves), and a server listening on loopback accepts only loopback
//! `Host` names (403). The one exception is the operator console's own pages: under
//! `/console` and `/v1/admin` an `Origin` naming the very host the request was sent to
//! (`http://127.0.0.1:8080` to `Host: 127.0.0.1:8080`) is the console calling its own server,
//! not another site, and passes; its cookie-authenticated requests face the console's CSRF
//! checks besides. A DNS-rebinding page that passes it (its own name in both) carries no
//! credential of this server: the console's cookie belongs to the real host name.
//!
//! Authentication. The [`Authenticator`] turns the credential into a [`Principal`](intentgate_core::Principal) that is
//! inserted into the request's extensions; handlers and MCP read the tenant only from it.
//! `/healthz`, `/readyz`, `/metrics`, `/openapi.json` and the OAuth protected-resource metadata need no
//! credential (they carry no caller data). The admin API keeps its own token and the console
//! its own sessions: a request to either gets a principal when its credential is one (never
//! with `auth: none`), and is otherwise left to them.
//! `/mcp` needs the `call` scope; each other route checks the scope it needs.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use intentgate_core::Scope;

use crate::auth::{AuthFailure, Authenticator};
use crate::problem::Problem;

pub use crate::auth::RESOURCE_METADATA_PATH;
/// The `Host` names a loopback listener accepts (with or without a port).
pub const LOOPBACK_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "[::1]"];
/// Where the MCP endpoint is mounted; it needs the `call` scope.
const MCP_PATH: &str = "/mcp";
/// Where the admin API lives; it has its own token.
const ADMIN_PREFIX: &str = "/v1/admin";
/// Where the operator console is served; it has its own sign-in and sessions.
pub const CONSOLE_PATH: &str = "/console";

/// Settings of the browser checks.
#[derive(Debug, Clone, Default)]
pub struct BrowserOptions {
    /// Origins (`https://console.example.com`) whose requests are accepted; any other
    /// request that carries an `Origin` is refused.
    pub allowed_origins: Vec<String>,
    /// Accept only loopback `Host` names: set for a listener on a loopback address.
    pub loopback_hosts_only: bool,
}

/// The browser checks, as an axum middleware over [`BrowserOptions`].
pub async fn browser_checks(
    State(options): State<Arc<BrowserOptions>>,
    request: Request,
    next: Next,
) -> Response {
    let own_origin_allowed = is_console_or_admin(request.uri().path());
    if let Err(problem) = check_browser(
        &options,
        request.method(),
        request.headers(),
        own_origin_allowed,
    ) {
        return problem.into_response();
    }
    next.run(request).await
}

/// `own_origin_allowed`: an `Origin` naming the request's own `Host` passes (the console's
/// paths only).
fn check_browser(
    options: &BrowserOptions,
    method: &Method,
    headers: &HeaderMap,
    own_origin_allowed: bool,
) -> Result<(), Problem> {
    check_host(headers)?;
    if options.loopback_hosts_only {
        let host = headers
            .get(header::HOST)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        if !is_loopback_host(host) {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "host-not-allowed",
                "Host not allowed",
                format!(
                    "this gateway listens on loopback and answers only to the host names {}; \
                     a request for {host:?} may come from a web page through DNS rebinding",
                    LOOPBACK_HOSTS.join(", ")
                ),
            ));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("").trim().trim_end_matches('/');
        let listed = options
            .allowed_origins
            .iter()
            .any(|allowed| allowed.trim_end_matches('/').eq_ignore_ascii_case(origin));
        let allowed = listed || (own_origin_allowed && same_origin(origin, headers));
        if !allowed {
            return Err(Problem::new(
                StatusCode::FORBIDDEN,
                "origin-not-allowed",
                "Origin not allowed",
                format!(
                    "requests from web pages are refused unless their origin is listed in \
                     gateway.allowed_origins; {origin:?} is not"
                ),
            ));
        }
    }
    let has_body = matches!(*method, Method::POST | Method::PUT | Method::PATCH);
    if has_body && !is_json(headers.get(header::CONTENT_TYPE)) {
        return Err(Problem::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "The body must be JSON",
            "send the body with `Content-Type: application/json`",
        ));
    }
    Ok(())
}

/// The request's one `Host`, with a valid port if it names one, on every listener: two
/// `Host` headers could be read differently by this server and a proxy or a check in front
/// of it (one judges the first, another the last), and a port out of range or not decimal
/// names no server at all (RFC 9112, section 3.2: both are a 400).
fn check_host(headers: &HeaderMap) -> Result<(), Problem> {
    let bad_host = |detail: String| {
        Problem::new(
            StatusCode::BAD_REQUEST,
            "bad-host",
            "Bad Host header",
            detail,
        )
    };
    let mut hosts = headers.get_all(header::HOST).iter();
    let Some(host) = hosts.next() else {
        return Ok(());
    };
    if hosts.next().is_some() {
        return Err(bad_host(
            "the request has more than one Host header; send exactly one, naming the gateway's \
             host and, if it is not the scheme's default, its port"
                .to_owned(),
        ));
    }
    let Ok(host) = host.to_str() else {
        return Err(bad_host(
            "the Host header is not visible ASCII; send the gateway's host name or address"
                .to_owned(),
        ));
    };
    let port = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((_, after)) => after.strip_prefix(':').map(Some).unwrap_or_else(|| {
                // Anything but `:port` after the bracketed address is not a port at all.
                (!after.is_empty()).then_some(after)
            }),
            None => None,
        },
        None => host.split_once(':').map(|(_, port)| port),
    };
    if let Some(port) = port
        && !valid_port(&format!(":{port}"))
    {
        return Err(bad_host(format!(
            "the Host header {host:?} names an invalid port {port:?}: a port is a decimal \
             number from 1 to 65535 (`127.0.0.1:8080`), or leave it out for the scheme's default"
        )));
    }
    Ok(())
}

/// The console's paths and the admin API's, where the console's own origin is accepted.
fn is_console_or_admin(path: &str) -> bool {
    let under = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    under(CONSOLE_PATH) || under(ADMIN_PREFIX)
}

/// True when `origin` (`http://host:port`, `https://host`) names the host the request was
/// sent to (its `Host` header): a page this server served is calling it.
pub fn same_origin(origin: &str, headers: &HeaderMap) -> bool {
    let Some(host) = headers
        .get(header::HOST)
        .and_then(|value| value.to_str().ok())
        .filter(|host| !host.is_empty())
    else {
        return false;
    };
    let authority = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    authority.is_some_and(|authority| authority.eq_ignore_ascii_case(host.trim()))
}

/// True for `localhost`, `127.0.0.1` and `[::1]`, with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let name = match host.strip_prefix('[') {
        // `[::1]:8080`: the name is the bracketed part.
        Some(rest) => match rest.split_once(']') {
            Some((inside, after)) if after.is_empty() || valid_port(after) => {
                return LOOPBACK_HOSTS.contains(&format!("[{inside}]").as_str());
            }
            _ => return false,
        },
        None => match host.split_once(':') {
            Some((name, port)) if valid_port(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host,
        },
    };
    LOOPBACK_HOSTS
        .iter()
        .any(|loopback| loopback.eq_ignore_ascii_case(name))
}

/// `:port` with a port of 1 to 65535, in decimal digits only.
fn valid_port(text: &str) -> bool {
    text.strip_prefix(':').is_some_and(|port| {
        !port.is_empty()
            && port.len() <= 5
            && port.bytes().all(|b| b.is_ascii_digit())
            && port
                .parse::<u32>()
                .is_ok_and(|port| (1..=65_535).contains(&port))
    })
}

/// `application/json`, with or without parameters (`; charset=utf-8`).
fn is_json(value: Option<&HeaderValue>) -> bool {
    let Some(text) = value.and_then(|value| value.to_str().ok()) else {
        return false;
    };
    let media_type = text.split(';').next().unwrap_or("").trim();
    media_type.eq_ignore_ascii_case("application/json")
}

/// What a route asks of its caller.
enum Access {
    /// No credential (health, metrics, the resource metadata).
    Public,
    /// The admin API and the console: a principal if the credential is one, else the admin
    /// API's token or the console's session.
    Admin,
    /// A principal with this scope (`None`: any scope; the handler checks).
    Principal(Option<Scope>),
}

fn access(path: &str) -> Access {
    match path {
        // The document describes the API, not the configured tools.
        "/healthz" | "/readyz" | "/metrics" | crate::openapi::OPENAPI_PATH => Access::Public,
        _ if path.starts_with(RESOURCE_METADATA_PATH) => Access::Public,
        _ if is_console_or_admin(path) => Access::Admin,
        MCP_PATH => Access::Principal(Some(Scope::Call)),
        _ => Access::Principal(None),
    }
}

/// Authenticates a request and inserts its [`Principal`], as an axum middleware.
pub async fn authenticate(
    State(authenticator): State<Arc<Authenticator>>,
    mut request: Request,
    next: Next,
) -> Response {
    let access = access(request.uri().path());
    if matches!(access, Access::Public) {
        return next.run(request).await;
    }
    // With `auth: none` every request is the one anonymous principal, whatever it carries; at
    // the admin API that would read as a valid credential without the `admin` scope (a 403),
    // so a bearer there is left to the admin token's check.
    if matches!(access, Access::Admin) && authenticator.is_none() {
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip());
    let result = authenticator.authenticate(request.headers(), peer).await;
    match (result, access) {
        (Ok(principal), access) => {
            if let Access::Principal(Some(scope)) = access
                && !principal.may(scope)
            {
                return Problem::missing_scope(&principal, scope).into_response();
            }
            request.extensions_mut().insert(principal);
            next.run(request).await
        }
        (Err(_), Access::Admin) => next.run(request).await,
        (Err(failure), _) => refused(&authenticator, failure),
    }
}

fn refused(authenticator: &Authenticator, failure: AuthFailure) -> Response {
    let rejected = matches!(failure, AuthFailure::Rejected(_));
    let (status, kind, title) = match failure {
        AuthFailure::Tenant(_) => (
            StatusCode::BAD_REQUEST,
            "tenant-not-allowed",
            "Tenant not allowed",
        ),
        AuthFailure::Missing => (
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "Credential required",
        ),
        AuthFailure::Rejected(_) => (
            StatusCode::UNAUTHORIZED,
            "unauthenticated",
            "Credential not accepted",
        ),
    };
    let mut response = Problem::new(status, kind, title, failure.to_string()).into_response();
    if status == StatusCode::UNAUTHORIZED {
        // RFC 6750, and the MCP authorization spec: tell the client where to learn how to
        // get a token.
        let mut challenge = "Bearer".to_owned();
        let mut parameters = Vec::new();
        if let Some(url) = authenticator.resource_metadata_path() {
            parameters.push(format!("resource_metadata=\"{url}\""));
        }
        if rejected {
            parameters.push("error=\"invalid_token\"".to_owned());
        }
        if !parameters.is_empty() {
            challenge = format!("{challenge} {}", parameters.join(", "));
        }
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
    }
    response
}

/// `GET /.well-known/oauth-protected-resource[/...]`: the metadata of RFC 9728, when JWT
/// authentication names its resource.
pub async fn resource_metadata(State(authenticator): State<Arc<Authenticator>>) -> Response {
    match authenticator.resource_metadata() {
        Some(metadata) => axum::Json(metadata).into_response(),
        None => Problem::new(
            StatusCode::NOT_FOUND,
            "not-found",
            "No protected-resource metadata",
            "this gateway publishes OAuth metadata only with JWT authentication and auth.jwt.resource set",
        )
        .into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_host_names_with_and_without_ports() {
        for good in [
            "localhost",
            "LOCALHOST:8080",
            "127.0.0.1",
            "127.0.0.1:1",
            "[::1]",
            "[::1]:8080",
        ] {
            assert!(is_loopback_host(good), "{good}");
        }
        for bad in [
            "",
            "rebind.evil.example",
            "localhost.evil.example",
            "127.0.0.1.nip.io",
            "127.0.0.1:",
            "127.0.0.1:99999",
            "127.0.0.1:0",
            "localhost:0x50",
            "[::1]:65536",
            "127.0.0.1:80:80",
            "[::1]x",
            "::1",
            "127.0.0.2",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn a_host_with_an_invalid_port_or_a_second_host_is_a_400_on_every_listener() {
        let routable = BrowserOptions::default();
        let check = |hosts: &[&'static str]| {
            let mut headers = HeaderMap::new();
            for host in hosts {
                headers.append(header::HOST, HeaderValue::from_static(host));
            }
            check_browser(&routable, &Method::GET, &headers, false)
        };
        for good in [
            "gw.example.com",
            "gw.example.com:8443",
            "[2001:db8::1]:1",
            "[::1]",
        ] {
            assert!(check(&[good]).is_ok(), "{good}");
        }
        for bad in [
            "127.0.0.1:99999",
            "localhost:0x50",
            "gw.example.com:",
            "gw.example.com:0",
            "[::1]:",
            "[::1]x",
            "127.0.0.1:80:80",
        ] {
            let problem = check(&[bad]).expect_err(bad);
            assert_eq!(problem.status, StatusCode::BAD_REQUEST, "{bad}");
            assert!(
                problem.detail.contains("invalid port"),
                "{bad}: {}",
                problem.detail
            );
        }
        let two = check(&["127.0.0.1", "evil.example"]).unwrap_err();
        assert_eq!(two.status, StatusCode::BAD_REQUEST);
        assert!(two.detail.contains("more than one Host"), "{}", two.detail);
    }

    #[test]
    fn only_the_console_and_the_admin_api_accept_their_own_origin() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8080"));
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8080"),
        );
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let options = BrowserOptions::default();
        assert!(check_browser(&options, &Method::POST, &headers, true).is_ok());
        assert!(check_browser(&options, &Method::POST, &headers, false).is_err());
        headers.insert(
            header::ORIGIN,
            HeaderValue::from_static("http://127.0.0.1:8081"),
        );
        assert!(check_browser(&options, &Method::POST, &headers, true).is_err());
        for path in [
            "/console",
            "/console/intents",
            "/v1/admin",
            "/v1/admin/flags",
        ] {
            assert!(is_console_or_admin(path), "{path}");
        }
        for path in ["/consoles", "/v1/administer", "/v1/tools/x/call", "/"] {
            assert!(!is_console_or_admin(path), "{path}");
        }
    }

    #[test]
    fn an_origin_is_the_same_only_with_the_same_host_and_port() {
        let mut headers = HeaderMap::new();
        headers.insert(header::HOST, HeaderValue::from_static("gw.example.com"));
        assert!(same_origin("https://gw.example.com", &headers));
        assert!(same_origin("http://GW.example.com", &headers));
        for other in [
            "https://gw.example.com:8443",
            "https://evil.example.com",
            "gw.example.com",
            "null",
            "https://gw.example.com.evil.example",
        ] {
            assert!(!same_origin(other, &headers), "{other}");
        }
        assert!(!same_origin("https://gw.example.com", &HeaderMap::new()));
    }

    #[test]
    fn only_json_bodies_pass() {
        let value = |text: &'static str| HeaderValue::from_static(text);
        assert!(is_json(Some(&value("application/json"))));
        assert!(is_json(Some(&value("Application/JSON; charset=utf-8"))));
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
            "application/jsonx",
        ] {
            assert!(!is_json(Some(&value(bad))), "{bad}");
        }
        assert!(!is_json(None));
    }
}

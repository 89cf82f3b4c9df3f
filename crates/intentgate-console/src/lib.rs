//! The operator console of intentgate: web pages at `/console` for the people who handle an
//! incident, over the admin API.
//!
//! | route | what it does |
//! |---|---|
//! | `GET /console`, `GET /console/{page}` | the console's page with a live session; the sign-in form without one |
//! | `GET /console/assets/{file}` | the style sheet, the scripts and the icon, embedded in the binary |
//! | `POST /console/session` | signs in: `Authorization: Bearer <admin token or admin-scoped key>`; sets the session cookie |
//! | `DELETE /console/session` | signs out (with the CSRF token) and clears the cookie |
//!
//! Everything a page shows or changes goes through the admin API (`/v1/admin/...`), which
//! the page's script calls with the session cookie: the console adds no second path to the
//! ledger. [`Console::admin_router`] is the admin API with that cookie accepted:
//! `guard.rs` finds the request's session and, for a request that changes something,
//! requires the session's CSRF token in `X-Intentgate-Csrf`, an `Origin` naming this server
//! and no cross-site `Sec-Fetch-Site`, then hands the admin API a [`ConsoleUser`](intentgate_admin::ConsoleUser), under
//! whose name the change is recorded. A request with an `Authorization` header is the admin
//! API's as before; the cookie changes nothing for it.
//!
//! Sign-in takes the credentials the admin API takes (its token, or a credential with the
//! `admin` scope), checked by [`Admin::sign_in`] with the same count of wrong tokens.
//! Sessions (`session.rs`) live in the ledger, shared by every replica on it and kept over
//! a restart; the browser holds a random token in a
//! `__Host-` cookie that is `Secure`, `HttpOnly` and `SameSite=Strict`, so no script can
//! read it and no other site's page can make the browser send it. Browsers keep `Secure`
//! cookies over plain HTTP only from `localhost` and `127.0.0.1`: elsewhere serve the
//! console over HTTPS (a TLS-terminating proxy in front of the gateway).
//!
//! Every console response carries strict headers (`pages.rs`): a Content-Security-Policy
//! that allows only this server's own scripts and styles (no inline code, no framing), no
//! sniffing, no referrer, no caching of pages and data.
//!
//! **API boundary:** the crate knows the admin API ([`Admin`]), the server's edge rules and
//! the ledger's console sessions; it reads no intent and no config.

mod guard;
mod pages;
mod session;
mod sign_in;

use std::sync::Arc;

use axum::routing::{get, post};
use intentgate_admin::Admin;
use intentgate_ledger::Ledger;

pub use guard::{CSRF_HEADER, SESSION_COOKIE};
pub use session::{SESSION_IDLE_MAX, SESSION_LIFETIME_MAX, Session, SessionError, Sessions};

/// Where the console is served (the edge lets its own origin in there).
pub const CONSOLE_PATH: &str = intentgate_server::edge::CONSOLE_PATH;

/// What the console's handlers share.
pub(crate) struct Shared {
    pub admin: Admin,
    pub sessions: Sessions,
}

/// The console over an admin API: its pages, and the admin API with its sessions accepted.
#[derive(Clone)]
pub struct Console {
    shared: Arc<Shared>,
}

impl Console {
    /// A console over `admin`, its sessions kept in `ledger` (shared by every replica on
    /// it) and valid where the gateway accepts the admin credentials that `credentials`
    /// describes: any text that changes when one of them does (a key revoked, the admin
    /// token rotated), which ends every session made before.
    pub fn new(admin: Admin, ledger: Arc<dyn Ledger>, credentials: &[u8]) -> Console {
        Console {
            shared: Arc::new(Shared {
                admin,
                sessions: Sessions::new(ledger, credentials),
            }),
        }
    }

    /// The console's routes under `/console`, to merge beside the HTTP API.
    pub fn router(&self) -> axum::Router {
        axum::Router::new()
            .route("/console", get(pages::page))
            .route("/console/", get(pages::page))
            .route("/console/assets/{file}", get(pages::asset))
            .route(
                "/console/session",
                post(sign_in::sign_in).delete(sign_in::sign_out),
            )
            .route("/console/{*page}", get(pages::page))
            .layer(axum::middleware::from_fn(pages::strict_headers))
            .with_state(self.shared.clone())
    }

    /// The admin API's routes, accepting the console's session cookie beside its own
    /// credentials; replaces `Admin::router` where the console is served.
    pub fn admin_router(&self) -> axum::Router {
        self.shared
            .admin
            .router()
            .layer(axum::middleware::from_fn_with_state(
                self.shared.clone(),
                guard::admin_session,
            ))
    }
}

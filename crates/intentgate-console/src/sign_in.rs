//! `POST /console/session` (sign in) and `DELETE /console/session` (sign out).
//!
//! The sign-in form's script sends the credential as `Authorization: Bearer`, the header the
//! admin API reads, so the credential never travels in a URL or a form field a proxy might
//! log, and a cross-site form can't send it (a form can't set headers; a script of another
//! origin needs a preflight the gateway never approves). The edge has already turned an
//! admin-scoped key or token into a principal; [`Admin::sign_in`](intentgate_admin::Admin::sign_in)
//! accepts that or the admin token, counting wrong tokens as the admin API does. A
//! credential that also has the `approve` scope makes the session an approver
//! ([`Approver`]), whose decisions on held intents are recorded under its own subject.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use intentgate_admin::Approver;
use intentgate_core::limits::ACTOR_LENGTH_MAX;
use intentgate_core::text::cut;
use intentgate_server::Problem;
use serde_json::json;

use crate::Shared;
use crate::guard::{
    SESSION_COOKIE, check_change, check_same_origin, ledger_unavailable, private, session_of,
};
use crate::session::{SESSION_LIFETIME_MAX, SessionError, now_ms};

/// Prefix of the actor a console user's changes are recorded under.
const ACTOR_PREFIX: &str = "console:";

pub(crate) async fn sign_in(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    // A page of another site must not sign the browser in (with the attacker's credential,
    // to watch what the operator then does).
    if let Err(problem) = check_same_origin(request.headers()) {
        return private(problem.into_response());
    }
    if !request.headers().contains_key(header::AUTHORIZATION) {
        return private(
            Problem::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "Credential required",
                "sign in with the admin token or an API key with the admin scope, sent as \
`Authorization: Bearer <credential>` (the sign-in form does this)",
            )
            .into_response(),
        );
    }
    let subject = match shared.admin.sign_in(&request) {
        Ok(subject) => subject,
        Err(response) => return private(*response),
    };
    let actor = cut(&format!("{ACTOR_PREFIX}{subject}"), ACTOR_LENGTH_MAX).to_owned();
    // A credential with the `approve` scope makes the session its approver: decisions are
    // recorded under the credential's own subject, so the ledger can refuse the one that
    // asked, and only on its tenant's intents.
    let approver = Approver::of_request(&request);
    let (id, _) = match shared
        .sessions
        .create(actor.clone(), approver.clone(), now_ms())
        .await
    {
        Ok(created) => created,
        Err(error) => {
            tracing::error!(%error, "no console session could be made");
            let detail = match error {
                SessionError::NoRandomness(_) => {
                    "the gateway could not draw random bytes for a session token; see its log"
                }
                SessionError::Ledger(_) => {
                    "the ledger that keeps the console's sessions could not store this one; try \
again, and see the gateway's log"
                }
            };
            return private(
                Problem::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "no-session",
                    "No session could be made",
                    detail,
                )
                .into_response(),
            );
        }
    };
    tracing::info!(%actor, approver = approver.is_some(), "signed in to the console");
    let mut response = Json(json!({
        "actor": actor,
        "approver": approver.map(|approver| json!({
            "subject": approver.subject,
            "tenant": approver.tenant,
        })),
    }))
    .into_response();
    let cookie = format!(
        "{SESSION_COOKIE}={id}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_LIFETIME_MAX.as_secs()
    );
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    private(response)
}

pub(crate) async fn sign_out(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let found = match session_of(&shared, request.headers()).await {
        Ok(found) => found,
        Err(problem) => return private(problem.into_response()),
    };
    if let Some((id, session)) = found {
        // Signing someone out is a change too: a page of another site must not do it.
        if let Err(problem) = check_change(request.headers(), &session) {
            return private(problem.into_response());
        }
        // Deleted from the ledger: every replica refuses the cookie from now on.
        if let Err(error) = shared.sessions.remove(&id).await {
            tracing::error!(%error, "the console session could not be ended in the ledger");
            return private(ledger_unavailable().into_response());
        }
        tracing::info!(actor = %session.actor, "signed out of the console");
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    let expired =
        format!("{SESSION_COOKIE}=; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=0");
    if let Ok(value) = HeaderValue::from_str(&expired) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    private(response)
}

//! The OpenAPI 3.1 document of the HTTP API, served at `GET /openapi.json`, and the one list
//! of the API's routes.
//!
//! [`routes`] registers every handler of `routes.rs` together with its `#[utoipa::path]`, so
//! the router that serves the API and the document that describes it are built from the same
//! list: a route can't be served undocumented or documented unserved. A new route is added
//! there, as its handler with a `#[utoipa::path]` attribute; its bodies are types of
//! `wire.rs` deriving `ToSchema`, so the document is generated from what the handler really
//! sends and reads.
//!
//! Three routes of the intent API are the exception, for a reason of axum's router: see
//! [`routes`].
//!
//! Every error answer is `application/problem+json` ([`ProblemBody`]): an annotation names
//! only its status and what it means there, and [`problem_bodies`] gives each 4xx and 5xx
//! of the document that body, once, rather than every annotation repeating it.
//!
//! Routes served beside the API (the admin API, mounted by `intentgate serve`) describe
//! themselves: their operations come in as `ServerOptions::openapi_extra` and are merged
//! into the document ([`document_with`]). The document describes the API, not the
//! configured tools, so it is built once per server, when the server starts, and served
//! without a credential, behind the same edge (`Origin`, `Host`) as every route.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::routing::{get, post};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{
    Content, ContentBuilder, OpenApi as Document, Ref, RefOr, Response, ResponseBuilder,
};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::AppState;
use crate::intent_api;
use crate::routes as handlers;
use crate::wire::ProblemBody;

/// Where the document is served.
pub const OPENAPI_PATH: &str = "/openapi.json";
/// The name of the security scheme of every route that needs a credential.
pub const BEARER_SCHEME: &str = "bearer";
/// The media type of every error answer (RFC 9457).
pub const PROBLEM_CONTENT_TYPE: &str = "application/problem+json";

/// The document's title, version and security schemes; the paths come from [`routes`].
#[derive(OpenApi)]
#[openapi(
    info(
        title = "intentgate",
        description = "A retry-safe tool gateway for AI agents: list tools, call them through the \
                       intent ledger, read intents, and grant and settle the intents of tools \
                       the caller's own code executes (the intent API). Errors are \
                       `application/problem+json` (RFC 9457).",
    ),
    components(schemas(ProblemBody)),
    modifiers(&SecuritySchemes),
)]
struct ApiDoc;

/// Adds the bearer scheme: an API key or a JWT, as `auth` in the config says.
struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, document: &mut Document) {
        let components = document.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            BEARER_SCHEME,
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "`Authorization: Bearer <credential>`: an API key (`intentgate auth \
                         new-key`) or a JWT from the configured issuer, as the gateway's \
                         `auth` section says. With `auth: none` (loopback only) no credential \
                         is needed.",
                    ))
                    .build(),
            ),
        );
    }
}

/// The intent API's operations on an intent by its id, documented here rather than through
/// `routes!` (see [`routes`]).
#[derive(OpenApi)]
#[openapi(paths(intent_api::get_intent_by_id, intent_api::settle, intent_api::renew))]
struct IntentsById;

/// Every route of the API with its handler and its documentation: the one list.
///
/// The intent API's routes by id (`GET /v1/intents/{id}`, `POST /v1/intents/{id}/settle`,
/// `POST /v1/intents/{id}/renew`) can't be registered with `routes!`: axum's router allows
/// one parameter name per position, and `GET /v1/intents/{tool}/{*key}` names the first
/// segment after `/v1/intents/` `tool`. They are served as `GET /v1/intents/{tool}` and
/// `POST /v1/intents/{tool}/{*key}` (whose handler tells settle from renew by the last
/// segment and answers 405 to any other), and documented as the three operations by their
/// `#[utoipa::path]`, added beside the routes that serve them. `tests/openapi.rs` checks that
/// these, too, are served as documented and documented as served.
pub(crate) fn routes() -> OpenApiRouter<Arc<AppState>> {
    let mut router = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(handlers::healthz))
        .routes(routes!(handlers::readyz))
        .routes(routes!(handlers::metrics))
        .routes(routes!(handlers::openapi_document))
        .routes(routes!(handlers::list_tools))
        .routes(routes!(handlers::call_tool))
        .routes(routes!(handlers::get_intent))
        .routes(routes!(intent_api::grant))
        // `{tool}` is the intent's id on these two: see above.
        .route("/v1/intents/{tool}", get(intent_api::get_intent_by_id))
        .route("/v1/intents/{tool}/{*key}", post(intent_api::act_on_intent));
    router.get_openapi_mut().merge(IntentsById::openapi());
    router
}

/// The API's routes (the one list is [`routes`]), with the fallback and the body limit.
pub(crate) fn router(state: Arc<AppState>) -> axum::Router {
    let body_limit = state.options.body_limit_bytes;
    let (routes, _document) = routes().split_for_parts();
    routes
        .fallback(handlers::not_found)
        .layer(DefaultBodyLimit::max(body_limit))
        .with_state(state)
}

/// The content of an error answer: [`ProblemBody`] as `application/problem+json`.
fn problem_content() -> Content {
    ContentBuilder::new()
        .schema(Some(Ref::from_schema_name("ProblemBody")))
        .build()
}

/// An answer of `application/problem+json` ([`ProblemBody`]), for `description`: for
/// responses built in code rather than annotated.
pub fn problem_response(description: &str) -> RefOr<Response> {
    RefOr::T(
        ResponseBuilder::new()
            .description(description)
            .content(PROBLEM_CONTENT_TYPE, problem_content())
            .build(),
    )
}

/// Gives every 4xx and 5xx answer of `document` that declares no body the problem body:
/// the one place the error answers' content is declared. `document` must hold the
/// `ProblemBody` schema (the API's does, and so does the admin API's).
pub fn problem_bodies(document: &mut Document) {
    for item in document.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ];
        for operation in operations.into_iter().flatten() {
            for (status, response) in operation.responses.responses.iter_mut() {
                let is_error = matches!(status.as_bytes().first(), Some(b'4' | b'5'));
                if let (true, RefOr::T(response)) = (is_error, response)
                    && response.content.is_empty()
                {
                    response
                        .content
                        .insert(PROBLEM_CONTENT_TYPE.to_owned(), problem_content());
                }
            }
        }
    }
}

/// The document of the API alone, as served by a server without `openapi_extra`.
pub fn document() -> Document {
    document_with(None)
}

/// The document as served: the paths of [`routes`] and those of `extra` (the operations of
/// routes served beside the API), with axum's wildcard segments (`{*key}`, the rest of the
/// path) written as OpenAPI path parameters (`{key}`). Where both hold an operation of one
/// method and path, or a schema of one name, the API's is kept; `extra` should name neither
/// (axum refuses to merge routers that serve one route twice anyway).
pub fn document_with(extra: Option<&Document>) -> Document {
    let mut document = routes().into_openapi();
    if let Some(extra) = extra {
        document.merge(extra.clone());
    }
    problem_bodies(&mut document);
    let paths = std::mem::take(&mut document.paths.paths);
    document.paths.paths = paths
        .into_iter()
        .map(|(path, item)| (path.replace("{*", "{"), item))
        .collect();
    document
}

/// [`document_with`] as JSON, built once per server.
pub(crate) fn document_json(extra: Option<&Document>) -> Bytes {
    let text = document_with(extra)
        .to_json()
        .expect("an OpenAPI document is plain JSON");
    Bytes::from(text)
}

//! The admin API's part of the OpenAPI document, and the one list of its routes.
//!
//! [`routes`] registers every admin handler together with its `#[utoipa::path]`, so the
//! router that serves the admin API ([`crate::Admin::router`]) and [`openapi`], which the
//! server merges into `GET /openapi.json` when it mounts the admin API, are built from the
//! same list: an admin route can't be served undocumented or documented unserved.
//!
//! What every admin operation shares is added here rather than on each handler: the
//! credential it needs (the `bearer` scheme of the HTTP API, carrying the admin token or a
//! credential with the `admin` scope, or else the console's session cookie) and the refusals
//! that come before any handler runs (401, 403, 429) or from the ledger (503).

use std::sync::Arc;

use intentgate_server::openapi::{BEARER_SCHEME, problem_bodies, problem_response};
use intentgate_server::wire::ProblemBody;
use utoipa::OpenApi;
use utoipa::openapi::OpenApi as Document;
use utoipa::openapi::security::SecurityRequirement;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::{AdminState, activity, alerts, approvals, export, flags, intents, reconcile};

/// The tag of every admin operation.
pub const ADMIN_TAG: &str = "admin";

/// The answers any admin operation may give before (or beside) its own: the credential
/// check, the browser edge and the ledger.
const REFUSALS: [(u16, &str); 4] = [
    (
        401,
        "No credential, or not the admin token nor a credential with the `admin` scope \
         (with a `WWW-Authenticate: Bearer` challenge).",
    ),
    (
        403,
        "A foreign `Origin` or a non-loopback `Host`, or a change made with the console's \
         session without its CSRF token.",
    ),
    (
        429,
        "This source address sent too many wrong tokens; it is refused for a while, whatever \
         it sends (`Retry-After` says how long).",
    ),
    (503, "The ledger can't be reached; try again."),
];

/// The admin tag and the schema of its errors; the paths come from [`routes`].
#[derive(OpenApi)]
#[openapi(
    tags((
        name = "admin",
        description = "The admin API, for operators: the kill switch, intents read and \
                       resolved by hand, erasures, reconciliation, activity, alerts and \
                       intents held for approval. Every operation needs \
                       `Authorization: Bearer` with the admin token (`INTENTGATE_ADMIN_TOKEN`) or a credential with the `admin` scope, or \
                       the console's session cookie (and, for a change, its CSRF token). \
                       Served only when the admin API is on; otherwise every `/v1/admin/` \
                       path answers 404 `admin-off`. The approvals operations also take a \
                       credential with the `approve` scope (its own tenant's held intents), \
                       and only such a credential decides.",
    )),
    components(schemas(ProblemBody)),
)]
struct AdminDoc;

/// Every admin route with its handler and its documentation: the one list.
pub(crate) fn routes() -> OpenApiRouter<Arc<AdminState>> {
    OpenApiRouter::with_openapi(AdminDoc::openapi())
        .routes(routes!(flags::list))
        .routes(routes!(flags::set))
        .routes(routes!(intents::list))
        .routes(routes!(intents::show))
        .routes(routes!(intents::unknown))
        .routes(routes!(intents::resolve))
        .routes(routes!(intents::reopen))
        .routes(routes!(intents::erase))
        .routes(routes!(reconcile::run))
        .routes(routes!(reconcile::list))
        .routes(routes!(reconcile::show))
        .routes(routes!(export::mismatches))
        .routes(routes!(export::subjects))
        .routes(routes!(activity::show))
        .routes(routes!(alerts::list))
}

/// The approvals routes, with their own credential check (`auth::require_access`): served
/// beside [`routes`] and documented with them.
pub(crate) fn approval_routes() -> OpenApiRouter<Arc<AdminState>> {
    OpenApiRouter::new()
        .routes(routes!(approvals::list))
        .routes(routes!(approvals::approve))
        .routes(routes!(approvals::deny))
}

/// The admin API's operations as an OpenAPI document fragment, for the server to merge into
/// its own (`ServerOptions::openapi_extra`). Each operation carries the `admin` tag, the
/// `bearer` security requirement and the refusals every admin route may answer.
pub fn openapi() -> Document {
    let mut document = routes().merge(approval_routes()).into_openapi();
    for item in document.paths.paths.values_mut() {
        let operations = [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.delete,
            &mut item.patch,
        ];
        for operation in operations.into_iter().flatten() {
            operation.tags = Some(vec![ADMIN_TAG.to_owned()]);
            operation.security = Some(vec![SecurityRequirement::new(
                BEARER_SCHEME,
                Vec::<String>::new(),
            )]);
            for (status, description) in REFUSALS {
                operation
                    .responses
                    .responses
                    .entry(status.to_string())
                    .or_insert_with(|| problem_response(description));
            }
        }
    }
    problem_bodies(&mut document);
    document
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    /// The operation ids of `document`, one per operation.
    fn operation_ids(document: &Document) -> Vec<String> {
        let mut ids = Vec::new();
        for item in document.paths.paths.values() {
            let operations = [&item.get, &item.put, &item.post, &item.delete, &item.patch];
            for operation in operations.into_iter().flatten() {
                ids.push(operation.operation_id.clone().expect("an operation id"));
            }
        }
        ids
    }

    #[test]
    fn merged_into_the_apis_document_nothing_of_the_admin_fragment_is_dropped_or_shadowed() {
        // The server's merge keeps the API's schema when both name one: the admin fragment
        // may share only the API's own problem schema, the same type.
        let api = intentgate_server::openapi::document();
        let admin = openapi();
        let api_schemas = &api.components.as_ref().unwrap().schemas;
        let admin_schemas = &admin.components.as_ref().unwrap().schemas;
        let shared: Vec<&String> = admin_schemas
            .keys()
            .filter(|name| api_schemas.contains_key(*name))
            .collect();
        assert_eq!(shared, ["ProblemBody"]);
        assert!(api_schemas["ProblemBody"] == admin_schemas["ProblemBody"]);
        // No path of the API's, and operation ids unique over both.
        for path in admin.paths.paths.keys() {
            assert!(!api.paths.paths.contains_key(path), "{path}");
        }
        let mut ids = operation_ids(&api);
        ids.extend(operation_ids(&admin));
        let unique: BTreeSet<&String> = ids.iter().collect();
        assert_eq!(unique.len(), ids.len(), "{ids:?}");
    }
}

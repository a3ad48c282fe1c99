//! `GET /v1/openapi.json`: the admin API described by OpenAPI 3.1, generated (by `utoipa`)
//! from the handlers' annotations and the shared wire types of [`crate::ops::types`], so the
//! document cannot drift from what the server parses and answers.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::admin;

/// The admin API's document.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Gatehouse admin API",
        description = "Every route takes `Authorization: Bearer <admin key>`: the configured \
            admin_key_file (identity `admin`) or a named key from `gatehouse admins add`. \
            Errors are `{code, message, retryable?}`. Lists are paged: `?after=&limit=`, the \
            next page's cursor in the `x-next-cursor` header."
    ),
    modifiers(&AdminKey),
    security(("admin_key" = [])),
    paths(
        admin::tokens::create, admin::tokens::list, admin::tokens::revoke,
        admin::nodes::list, admin::nodes::show, admin::nodes::cordon, admin::nodes::uncordon,
        admin::nodes::retire, admin::nodes::delete, admin::nodes::revoke_identity,
        admin::nodes::revoke_cert, admin::nodes::record_inventory, admin::nodes::inventories,
        admin::tenants::create, admin::tenants::list,
        admin::pools::create, admin::pools::list, admin::pools::show, admin::pools::update,
        admin::join_requests::list, admin::join_requests::show, admin::join_requests::approve,
        admin::join_requests::deny,
        admin::workflows::start, admin::workflows::list, admin::workflows::show,
        admin::workflows::complete, admin::workflows::cancel,
        admin::journal::events, admin::journal::audits,
        admin::prune::uses, admin::prune::tokens, admin::prune::events, admin::prune::audits,
        admin::attestors::list,
        admin::admins::create, admin::admins::list, admin::admins::revoke,
    )
)]
pub struct AdminApi;

/// The bearer scheme every admin route is behind.
struct AdminKey;

impl Modify for AdminKey {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// `GET /v1/openapi.json`: public, like `/v1/trust` (it describes the API, it grants nothing).
pub(super) async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(AdminApi::openapi())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_document_names_every_admin_route_and_type() {
        let doc = serde_json::to_value(AdminApi::openapi()).unwrap();
        let paths = doc["paths"].as_object().unwrap();
        for path in [
            "/v1/admin/tokens",
            "/v1/admin/nodes/{id}",
            "/v1/admin/pools/{tenant}/{id}",
            "/v1/admin/join-requests/{id}/approve",
            "/v1/admin/workflows",
            "/v1/admin/audits",
            "/v1/admin/admins/{name}/revoke",
        ] {
            assert!(paths.contains_key(path), "{path}");
        }
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for schema in [
            "CreateToken",
            "NodeDetail",
            "Event",
            "Audit",
            "TokenRole",
            "Id",
        ] {
            assert!(schemas.contains_key(schema), "{schema}");
        }
        assert_eq!(
            doc["components"]["schemas"]["CreateToken"]["properties"]["ttlSeconds"]["type"],
            "integer"
        );
    }
}

//! The REST adapter: one module per resource, each exporting `router()`, merged here
//! together with the OpenAPI document they describe.

pub mod admin;
pub mod agents;
pub mod approvals;
pub mod audit;
pub mod changes;
pub mod definitions;
pub use crate::error;
pub mod extract;
pub mod health;
pub mod policy;
pub mod reads;
pub mod runs;
pub mod tools;
pub mod upstreams;

use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "toolgate",
        description = "A multi-tenant tool gateway: tools defined once, called from REST, MCP and agents through one executor, governed and recorded.\n\nErrors are RFC 9457 `application/problem+json` bodies whose `type` is `urn:toolgate:error:<category>`; every response carries `x-request-id`.",
        license(name = "Apache-2.0", identifier = "Apache-2.0"),
    ),
    tags(
        (name = "tools", description = "List, describe and invoke tools"),
        (name = "agents", description = "Agents: a named model, prompt and toolset"),
        (name = "runs", description = "Agent runs: start, follow live (SSE), read, cancel"),
        (name = "approvals", description = "Approval policy, calls waiting for a person, decisions, and the outcome of calls that waited"),
        (name = "upstreams", description = "The tenant's own upstream MCP servers, whose tools it alone sees"),
        (name = "audit", description = "The audit log of every tool call"),
        (name = "tenancy", description = "Tenants, principals and API keys"),
        (name = "health", description = "Liveness and readiness"),
    ),
    components(schemas(error::Problem, error::ProblemViolation, tools::Format)),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

/// `Authorization: Bearer <API key or JWT>` on every route but health.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "An API key (tg_…) or a JWT from the configured issuer",
                    ))
                    .build(),
            ),
        );
    }
}

/// Every documented route, with the OpenAPI document they make up.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(tools::router())
        .merge(agents::router())
        .merge(runs::router())
        .merge(policy::router())
        .merge(approvals::router())
        .merge(upstreams::router())
        .merge(definitions::router())
        .merge(audit::router())
        .merge(admin::router())
        .merge(health::router())
}

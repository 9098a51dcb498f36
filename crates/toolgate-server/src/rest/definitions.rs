//! `/v1/tool-definitions`: the pinned definitions of upstream tools (the rug-pull
//! defence), and approving a changed one that waits (see `crate::pins`). A tenant admin
//! sees and approves those of the tenant's own upstreams; the operator (`tenants:manage`)
//! those of the configured upstreams, with `?owner=operator`.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use toolgate_core::ToolError;
use toolgate_core::auth::scopes;
use toolgate_mcp::vetting::diff;
use toolgate_store::{PinRecord, PinsAfter, PinsOnly};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppPath, AppQuery, DEFAULT_PAGE, MAX_PAGE, bounded};
use crate::auth::Caller;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_definitions))
        .routes(routes!(approve_definition))
}

/// Whose upstreams' definitions.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct OwnerQuery {
    /// `operator` for the configured upstreams' (needs `tenants:manage`); the caller's
    /// tenant's own upstreams' otherwise.
    #[serde(default)]
    pub owner: Option<String>,
}

/// Which definitions, a page at a time.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// `operator` for the configured upstreams' (needs `tenants:manage`); the caller's
    /// tenant's own upstreams' otherwise.
    #[serde(default)]
    pub owner: Option<String>,
    /// Only those of this upstream.
    pub upstream: Option<String>,
    /// Only those `quarantined` (waiting for approval), or only those `pinned`.
    pub status: Option<String>,
    /// Opaque cursor from a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Page size, 1–500 (default 100).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<usize>,
}

/// One upstream tool's pinned definition, and a changed one waiting for approval.
#[derive(Debug, Serialize, ToSchema)]
pub struct DefinitionView {
    pub upstream: String,
    /// The tool's name at the upstream.
    pub tool: String,
    /// Its name here.
    pub exported: String,
    /// `pinned` (offered as pinned) or `quarantined` (a changed or suspicious definition
    /// waits: the tool is not offered).
    pub status: &'static str,
    pub pinned_hash: Option<String>,
    pub pending_hash: Option<String>,
    /// What reads as written at the model in the waiting (else the pinned) description.
    pub findings: Vec<String>,
    /// The fields of the waiting definition that differ from the pinned one, each with
    /// `before` and `after`.
    #[schema(value_type = Option<Object>)]
    pub diff: Option<serde_json::Value>,
    /// The waiting definition, whole.
    #[schema(value_type = Option<Object>)]
    pub pending: Option<serde_json::Value>,
    pub updated_at: DateTime<Utc>,
    pub approved_by: Option<Uuid>,
    pub approved_at: Option<DateTime<Utc>>,
}

/// One page of definitions: the quarantined first, then the pinned, each by upstream and
/// tool.
#[derive(Debug, Serialize, ToSchema)]
pub struct DefinitionList {
    pub definitions: Vec<DefinitionView>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A page's `next_cursor`: where it stopped, as hex of JSON (safe in a URL as it is).
fn next_cursor(after: &PinsAfter) -> String {
    hex::encode(serde_json::to_vec(after).unwrap_or_default())
}

/// Where a page goes on, from a `cursor` made by [`next_cursor`]; 400 for anything else.
fn after(cursor: Option<&str>) -> Result<Option<PinsAfter>, ApiError> {
    cursor
        .map(|cursor| {
            hex::decode(cursor)
                .ok()
                .and_then(|bytes| serde_json::from_slice(&bytes).ok())
                .ok_or_else(|| ApiError::Malformed("invalid cursor".into()))
        })
        .transpose()
}

/// What a person approves: the waiting definition they looked at, by its hash.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    /// `pending_hash` as listed: a definition that changed again since is not approved
    /// by mistake.
    pub hash: String,
}

impl From<PinRecord> for DefinitionView {
    fn from(p: PinRecord) -> Self {
        let diff = p.pending.as_ref().map(|pending| {
            diff(
                p.pinned.as_ref().unwrap_or(&serde_json::Value::Null),
                pending,
            )
        });
        Self {
            status: if p.pending_hash.is_some() {
                "quarantined"
            } else {
                "pinned"
            },
            upstream: p.upstream,
            tool: p.tool,
            exported: p.exported,
            pinned_hash: p.pinned_hash,
            pending_hash: p.pending_hash,
            findings: p.findings,
            diff,
            pending: p.pending,
            updated_at: p.updated_at,
            approved_by: p.approved_by.map(|a| a.0),
            approved_at: p.approved_at,
        }
    }
}

/// The owner column the caller may read and approve for.
fn owner(caller: &Caller, owner: Option<&str>) -> Result<Uuid, ApiError> {
    match owner {
        Some("operator") => {
            caller.require(crate::auth::TENANTS_MANAGE)?;
            Ok(toolgate_mcp::pins::OPERATOR)
        }
        None | Some("tenant") => {
            caller.require(scopes::TENANT_ADMIN)?;
            Ok(caller.auth.tenant.0)
        }
        Some(other) => Err(ToolError::invalid_arguments(format!(
            "owner is `operator` or `tenant`, not {other:?}"
        ))
        .into()),
    }
}

/// The pinned definitions of the tenant's upstreams' tools (or the operator's), a page at
/// a time: those quarantined (waiting for approval) first, then the pinned, each by
/// upstream and tool.
#[utoipa::path(get, path = "/v1/tool-definitions", tag = "upstreams",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of definitions", body = DefinitionList),
        (status = 400, description = "Unknown owner or status, bad limit or cursor", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tenant:admin` (or `tenants:manage` for the operator's)", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    ))]
async fn list_definitions(
    State(app): State<AppState>,
    caller: Caller,
    AppQuery(query): AppQuery<ListQuery>,
) -> Result<AppJson<DefinitionList>, ApiError> {
    let owner = owner(&caller, query.owner.as_deref())?;
    let waiting = match query.status.as_deref() {
        None => None,
        Some("quarantined") => Some(true),
        Some("pinned") => Some(false),
        Some(other) => {
            return Err(ToolError::invalid_arguments(format!(
                "status is `quarantined` or `pinned`, not {other:?}"
            ))
            .into());
        }
    };
    let limit = bounded("limit", query.limit, DEFAULT_PAGE, 1..=MAX_PAGE)?;
    let after = after(query.cursor.as_deref())?;
    let only = PinsOnly {
        upstream: query.upstream.as_deref(),
        waiting,
    };
    let mut pins = app
        .store
        .tool_pins_page(owner, only, after.as_ref(), limit + 1)
        .await?;
    let next_cursor = (pins.len() > limit).then(|| next_cursor(&PinsAfter::from(&pins[limit - 1])));
    pins.truncate(limit);
    Ok(AppJson(DefinitionList {
        definitions: pins.into_iter().map(DefinitionView::from).collect(),
        next_cursor,
    }))
}

/// Approve the waiting definition of an upstream tool: it becomes the pin, the tool is
/// offered again (its upstream lists its tools anew), and the approval is audited.
#[utoipa::path(post, path = "/v1/tool-definitions/{upstream}/{tool}/approve", tag = "upstreams",
    params(
        ("upstream" = String, Path, description = "Upstream name"),
        ("tool" = String, Path, description = "The tool's name at the upstream"),
        OwnerQuery,
    ),
    request_body(content = ApproveBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Approved: now pinned", body = DefinitionView),
        (status = 400, description = "Malformed body", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tenant:admin` (or `tenants:manage` for the operator's)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No definition with this hash waits for this tool", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
async fn approve_definition(
    State(app): State<AppState>,
    caller: Caller,
    AppPath((upstream, tool)): AppPath<(String, String)>,
    AppQuery(query): AppQuery<OwnerQuery>,
    AppJson(body): AppJson<ApproveBody>,
) -> Result<AppJson<DefinitionView>, ApiError> {
    let owner = owner(&caller, query.owner.as_deref())?;
    let approved = app
        .pins
        .approve(owner, &upstream, &tool, &body.hash, &caller.auth)
        .await?
        .ok_or_else(|| {
            ToolError::not_found(format!(
                "no definition of {tool:?} from {upstream:?} with this hash waits for approval"
            ))
            .with_suggestion("list them with GET /v1/tool-definitions")
        })?;
    Ok(AppJson(approved.into()))
}

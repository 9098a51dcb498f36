//! `/v1/upstreams`: a tenant's own upstream MCP servers and HTTP APIs (create, list,
//! read, replace, delete), each with its status on the instance that answers. Needs
//! `tenant:admin`. Only Streamable HTTP MCP upstreams: stdio ones run processes on the
//! gateway host and are the operator's (configuration file). An HTTP API is given by its
//! OpenAPI 3.x document (`openapi`) or as one endpoint with a JSON Schema (`endpoint`):
//! its operations become tools. Their tools appear to this tenant alone, as
//! `<name>__<tool>`. Credentials are write-only.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use toolgate_core::ToolError;
use toolgate_core::auth::scopes;
use toolgate_mcp::upstream::{State as LinkState, glob_problems, is_valid_name};
use toolgate_store::{UpstreamRecord, UpstreamWrite};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppPath, located};
use crate::auth::Caller;
use crate::state::AppState;
use crate::state::TenantUpstreams;
use toolgate_mcp::tenant_upstreams::{Credentials, Seen, UpstreamSettings};

mod credentials;
mod validate;

use credentials::*;
use validate::*;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_upstreams, create_upstream))
        .routes(routes!(get_upstream, replace_upstream, delete_upstream))
        .routes(routes!(
            get_my_credential,
            put_my_credential,
            delete_my_credential
        ))
}

/// A call's deadline when the caller gives none, unless the body says otherwise.
const DEFAULT_TIMEOUT_SECS: u64 = 60;

/// Headers an upstream's static headers may not replace, besides those the gateway sets
/// on every request ([`toolgate_tools::egress::sets_header`]): the MCP transport's own.
const RESERVED_HEADERS: &[&str] = &["mcp-session-id", "mcp-protocol-version", "last-event-id"];

/// An upstream to add, or what it becomes. Unknown fields are refused. `headers` and
/// `bearer` are write-only: replacing an upstream without them removes them.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "name": "docs",
    "url": "https://mcp.example.com/mcp",
    "bearer": "upstream-token",
    "allow": ["search*"],
    "timeout_secs": 30
}))]
pub struct UpstreamBody {
    /// `^[A-Za-z0-9_.-]{1,32}$`, unique in the tenant; not a name of the operator's
    /// upstreams.
    pub name: String,
    /// The upstream's Streamable HTTP endpoint: `https://` on a public address.
    pub url: String,
    /// Put before each of its tools' names; `<name>__` when absent.
    #[serde(default)]
    pub prefix: Option<String>,
    /// Static headers sent with every request to the upstream. Write-only. At most 32;
    /// with `bearer`, at most 16 KiB.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Sent as `Authorization: Bearer …` to the upstream. Write-only.
    #[serde(default)]
    pub bearer: Option<String>,
    /// Globs over the upstream's tool names: only these (all when empty), never `deny`.
    /// At most 100 each, of at most 128 bytes.
    #[serde(default)]
    #[schema(max_items = 100)]
    pub allow: Vec<String>,
    #[serde(default)]
    #[schema(max_items = 100)]
    pub deny: Vec<String>,
    /// A call's deadline when the caller gives none (default 60), seconds.
    #[serde(default)]
    pub timeout_secs: Option<u64>,
    /// The longest deadline a caller may ask for; at most the gateway's
    /// `tenant_upstreams.max_timeout_secs` (its default).
    #[serde(default)]
    pub max_timeout_secs: Option<u64>,
    /// Each progress report the upstream makes for a call moves the call's deadline to
    /// at least this long from then, never past `max_timeout_secs` (nor a deadline the
    /// caller asked for); unset, progress extends nothing. Milliseconds.
    #[serde(default)]
    pub progress_extends_ms: Option<u64>,
    /// On replace (`PUT`): keep the stored `bearer` and `headers` (write-only, so an
    /// editor cannot send them back), with neither in the body. Only while the URL keeps
    /// its origin (scheme, host and port): credentials never follow an upstream to
    /// another server unless sent again.
    #[serde(default)]
    pub keep_credentials: bool,
    /// An HTTP API instead of an MCP server: its OpenAPI 3.x document (JSON). Each
    /// operation becomes a tool calling `url` + the operation's path (the document's
    /// `servers` are not used: `url` is the address the gateway vets). At most one of
    /// `openapi` and `endpoint`.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub openapi: Option<serde_json::Value>,
    /// An HTTP API of one endpoint, at `url` itself: one tool.
    #[serde(default)]
    pub endpoint: Option<EndpointBody>,
    /// Per tool, by its name at the upstream: `name` (after the prefix: at most 64
    /// characters in all, never cut short), `description`, `fixed` arguments (hidden
    /// from callers' schema, always sent as set here; a caller giving one is refused)
    /// and `defaults` (sent when the caller gives none). MCP servers only.
    #[serde(default)]
    #[schema(value_type = Object, example = json!({"search": {"name": "find", "fixed": {"index": "docs"}}}))]
    pub overrides: BTreeMap<String, toolgate_mcp::upstream::ToolOverride>,
    /// Calls go out with each caller's own credential, which each principal stores at
    /// `PUT /v1/upstreams/{name}/credentials` (a caller with none cannot call); the
    /// upstream's own `bearer`/`headers` only list its tools. MCP servers only.
    #[serde(default)]
    pub personal_credentials: bool,
}

/// One HTTP endpoint as a tool: its arguments go as the query (`GET`, `HEAD`, `DELETE`)
/// or as the JSON body (`POST`, `PUT`, `PATCH`).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "tool": "current_weather",
    "method": "GET",
    "description": "The current weather in a city",
    "input_schema": {"type": "object", "required": ["city"], "properties": {"city": {"type": "string"}}}
}))]
pub struct EndpointBody {
    /// The tool's name before the prefix: `^[A-Za-z0-9_.-]{1,64}$`.
    pub tool: String,
    /// `GET`, `POST`, `PUT`, `PATCH`, `DELETE` or `HEAD`.
    pub method: String,
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the arguments: an object.
    #[schema(value_type = Object)]
    pub input_schema: serde_json::Value,
}

/// A tenant upstream, without its credentials' values.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "docs",
    "url": "https://mcp.example.com/mcp",
    "prefix": "docs__",
    "allow": ["search*"],
    "deny": [],
    "timeout_secs": 30,
    "max_timeout_secs": 300,
    "headers": [],
    "bearer": true,
    "revision": 1,
    "created_at": "2026-11-22T10:00:00Z",
    "updated_at": "2026-11-22T10:00:00Z",
    "status": {"state": "connected", "tools": ["docs__search"], "since": "2026-11-22T10:00:01Z"}
}))]
pub struct UpstreamView {
    pub name: String,
    /// `mcp` (an MCP server) or `http` (an HTTP API's operations).
    pub kind: &'static str,
    pub url: String,
    /// What its tools' names start with.
    pub prefix: String,
    pub allow: Vec<String>,
    pub deny: Vec<String>,
    pub timeout_secs: u64,
    pub max_timeout_secs: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub progress_extends_ms: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    #[schema(value_type = Object)]
    pub overrides: BTreeMap<String, toolgate_mcp::upstream::ToolOverride>,
    /// The names of its static headers (values are never shown).
    pub headers: Vec<String>,
    /// Whether a bearer token is set (it is never shown).
    pub bearer: bool,
    /// Whether calls go out with each caller's own credential.
    pub personal_credentials: bool,
    /// One more at each change.
    pub revision: i64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    pub status: UpstreamStatus,
}

/// The upstream's connection, as the instance answering sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct UpstreamStatus {
    /// `connected`; `connecting` (not yet, or again after losing it; calls to its tools
    /// fail as `upstream` errors meanwhile); `failed` (cannot be started here: see
    /// `last_error`); `starting` (this instance has not picked it up yet).
    pub state: &'static str,
    /// Its tools as this tenant sees them.
    pub tools: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// When `state` last changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Tools it lists (for an HTTP API: operations of its document) that are not offered,
    /// and why: a name not valid or too like another's, a schema refused, a definition
    /// awaiting approval.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UpstreamList {
    pub upstreams: Vec<UpstreamView>,
}

fn stored(record: &UpstreamRecord) -> Result<UpstreamSettings, ApiError> {
    serde_json::from_value(record.config.clone()).map_err(|e| {
        ApiError::Internal(anyhow::anyhow!(
            "stored upstream {} is unreadable: {e}",
            record.id
        ))
    })
}

fn view(upstreams: &TenantUpstreams, record: UpstreamRecord) -> Result<UpstreamView, ApiError> {
    let config = stored(&record)?;
    let status = match upstreams.seen(record.id) {
        Seen::Supervised(s) => UpstreamStatus {
            state: match s.state {
                LinkState::Connected => "connected",
                LinkState::Connecting => "connecting",
            },
            tools: s.tools,
            last_error: s.last_error,
            since: Some(s.since.into()),
            notes: s.notes,
        },
        Seen::Ready(ready) => UpstreamStatus {
            state: "ready",
            tools: ready.tools,
            last_error: None,
            since: Some(ready.since.into()),
            notes: ready.notes,
        },
        Seen::Failed(problem) => UpstreamStatus {
            state: "failed",
            tools: Vec::new(),
            last_error: Some(problem),
            since: None,
            notes: Vec::new(),
        },
        Seen::Unknown => UpstreamStatus {
            state: "starting",
            tools: Vec::new(),
            last_error: None,
            since: None,
            notes: Vec::new(),
        },
    };
    Ok(UpstreamView {
        prefix: config
            .prefix
            .clone()
            .unwrap_or_else(|| format!("{}__", record.name)),
        name: record.name,
        kind: if config.openapi.is_some() {
            "http"
        } else {
            "mcp"
        },
        url: config.url,
        allow: config.allow,
        deny: config.deny,
        timeout_secs: config.timeout_secs,
        max_timeout_secs: config.max_timeout_secs,
        progress_extends_ms: config.progress_extends_ms,
        overrides: config.overrides,
        headers: config.header_names,
        bearer: config.bearer,
        personal_credentials: config.personal,
        revision: record.revision,
        created_at: record.created_at,
        updated_at: record.updated_at,
        status,
    })
}

/// This gateway's tenant upstreams, after checking the caller may manage them.
fn manager<'a>(app: &'a AppState, caller: &Caller) -> Result<&'a TenantUpstreams, ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    app.upstreams.as_deref().ok_or_else(|| {
        ToolError::not_found(
            "tenant upstreams are disabled on this gateway (tenant_upstreams.enabled)",
        )
        .into()
    })
}

fn not_found(name: &str) -> ApiError {
    ToolError::not_found(format!("no upstream {name:?} in your tenant")).into()
}

/// Applies a change on this instance now (other instances follow within
/// `tenant_upstreams.sync_secs`). The change is stored already: a failure here is logged.
async fn apply(upstreams: &TenantUpstreams) {
    if let Err(err) = upstreams.sync().await {
        tracing::warn!(error = %err, "could not apply a tenant upstream change now; the next sync will");
    }
}

/// List the tenant's upstreams.
#[utoipa::path(get, path = "/v1/upstreams", tag = "upstreams",
    responses(
        (status = 200, description = "The resource", body = UpstreamList),
        (status = 403, description = "Needs `tenant:admin`", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    ))]
async fn list_upstreams(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<AppJson<UpstreamList>, ApiError> {
    let upstreams = manager(&app, &caller)?;
    let views = app
        .store
        .list_upstreams(caller.auth.tenant)
        .await?
        .into_iter()
        .map(|record| view(upstreams, record))
        .collect::<Result<_, _>>()?;
    Ok(AppJson(UpstreamList { upstreams: views }))
}

/// Add an upstream MCP server (Streamable HTTP) for the tenant.
///
/// Answers 201 once it is stored; the gateway connects in the background (`status`
/// says how far it got; `GET` it again to follow).
#[utoipa::path(post, path = "/v1/upstreams", tag = "upstreams",
    request_body(content = UpstreamBody, content_type = "application/json"),
    responses(
        (status = 201, description = "Created", body = UpstreamView),
        (status = 400, description = "Invalid upstream (every problem listed)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tenant:admin`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "An upstream of this name exists, or the tenant has as many as allowed", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
async fn create_upstream(
    State(app): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<UpstreamBody>,
) -> Result<Response, ApiError> {
    let upstreams = manager(&app, &caller)?;
    let tenant = caller.auth.tenant;
    let (name, config, sealed) = prepare(upstreams, &caller, body).await?;
    let write = UpstreamWrite {
        name: &name,
        config: &config,
        credentials: sealed.as_deref(),
    };
    let record = app
        .store
        .create_upstream(
            tenant,
            &write,
            caller.auth.principal.id,
            upstreams.max_per_tenant,
        )
        .await?;
    apply(upstreams).await;
    let location = format!("/v1/upstreams/{}", record.name);
    let created = view(upstreams, record)?;
    recorded(&app, &caller, "upstreams.create", &created).await?;
    Ok(located(StatusCode::CREATED, &location, created))
}

/// Read an upstream, with its connection status.
#[utoipa::path(get, path = "/v1/upstreams/{name}", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    responses(
        (status = 200, description = "The resource", body = UpstreamView),
        (status = 403, description = "Needs `tenant:admin`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such resource in your tenant", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    ))]
async fn get_upstream(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
) -> Result<AppJson<UpstreamView>, ApiError> {
    let upstreams = manager(&app, &caller)?;
    let record = app
        .store
        .get_upstream(caller.auth.tenant, &name)
        .await?
        .ok_or_else(|| not_found(&name))?;
    Ok(AppJson(view(upstreams, record)?))
}

/// Replace an upstream (credentials included: absent ones are removed, unless
/// `keep_credentials` keeps the stored ones). Its connection is made again.
#[utoipa::path(put, path = "/v1/upstreams/{name}", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    request_body(content = UpstreamBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The resource", body = UpstreamView),
        (status = 400, description = "Invalid upstream (every problem listed)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tenant:admin`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such resource in your tenant", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Renamed to a name in use", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
async fn replace_upstream(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
    AppJson(body): AppJson<UpstreamBody>,
) -> Result<AppJson<UpstreamView>, ApiError> {
    let upstreams = manager(&app, &caller)?;
    let keep = body.keep_credentials;
    if keep && (body.bearer.is_some() || !body.headers.is_empty()) {
        return Err(ToolError::invalid_arguments(
            "keep_credentials keeps the stored bearer and headers: send new ones or keep them, not both",
        )
        .into());
    }
    let (new_name, mut config, mut sealed) = prepare(upstreams, &caller, body).await?;
    if keep {
        let old = app
            .store
            .get_upstream(caller.auth.tenant, &name)
            .await?
            .ok_or_else(|| not_found(&name))?;
        sealed = kept_credentials(upstreams, &caller, &old, &new_name, &mut config)?;
    }
    let write = UpstreamWrite {
        name: &new_name,
        config: &config,
        credentials: sealed.as_deref(),
    };
    let record = app
        .store
        .update_upstream(caller.auth.tenant, &name, &write)
        .await?
        .ok_or_else(|| not_found(&name))?;
    apply(upstreams).await;
    let replaced = view(upstreams, record)?;
    recorded(&app, &caller, "upstreams.update", &replaced).await?;
    Ok(AppJson(replaced))
}

/// Records a change to an upstream as it now stands (its view: credentials never shown),
/// without its connection's status.
async fn recorded(
    app: &AppState,
    caller: &Caller,
    operation: &str,
    upstream: &UpstreamView,
) -> Result<(), ApiError> {
    let mut change = serde_json::to_value(upstream).unwrap_or_default();
    if let Some(fields) = change.as_object_mut() {
        fields.remove("status");
    }
    super::changes::record(app, caller, operation, change).await
}

/// Delete an upstream: its tools go, its connection ends.
#[utoipa::path(delete, path = "/v1/upstreams/{name}", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "Needs `tenant:admin`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such resource in your tenant", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
async fn delete_upstream(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
) -> Result<StatusCode, ApiError> {
    let upstreams = manager(&app, &caller)?;
    if !app.store.delete_upstream(caller.auth.tenant, &name).await? {
        return Err(not_found(&name));
    }
    // A new upstream of this name starts with nothing pinned.
    app.store
        .delete_tool_pins(caller.auth.tenant.0, &name)
        .await?;
    apply(upstreams).await;
    let change = serde_json::json!({"name": name});
    super::changes::record(&app, &caller, "upstreams.delete", change).await?;
    Ok(StatusCode::NO_CONTENT)
}

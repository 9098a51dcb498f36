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
use toolgate_mcp::upstream::{State as LinkState, glob_problem, is_valid_name};
use toolgate_store::{UpstreamRecord, UpstreamWrite};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppPath, located};
use crate::auth::Caller;
use crate::state::AppState;
use crate::state::TenantUpstreams;
use toolgate_mcp::tenant_upstreams::{Credentials, Seen, Stored};

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

/// Headers the gateway sets itself, which an upstream's static headers may not replace.
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "host",
    "content-length",
    "content-type",
    "accept",
    "connection",
    "transfer-encoding",
    "te",
    "upgrade",
    "mcp-session-id",
    "mcp-protocol-version",
    "last-event-id",
    "traceparent",
    "tracestate",
];

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
    /// Static headers sent with every request to the upstream. Write-only.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Sent as `Authorization: Bearer …` to the upstream. Write-only.
    #[serde(default)]
    pub bearer: Option<String>,
    /// Globs over the upstream's tool names: only these (all when empty), never `deny`.
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
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

/// A principal's own credential for an upstream that calls with them. Write-only.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PersonalBody {
    /// Sent as `Authorization: Bearer …` instead of the upstream's.
    #[serde(default)]
    pub bearer: Option<String>,
    /// Sent with every request, over the upstream's headers of the same name.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// What a principal stored for an upstream, without the values.
#[derive(Debug, Serialize, ToSchema)]
pub struct PersonalView {
    pub bearer: bool,
    pub headers: Vec<String>,
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
    /// For an HTTP API: operations of its document that did not become tools, and why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct UpstreamList {
    pub upstreams: Vec<UpstreamView>,
}

fn stored(record: &UpstreamRecord) -> Result<Stored, ApiError> {
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
            notes: Vec::new(),
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

/// Checks a body, listing every problem; returns what to store and the credentials.
async fn validate(
    upstreams: &TenantUpstreams,
    body: UpstreamBody,
) -> Result<(Stored, Credentials), ApiError> {
    let mut problems: Vec<(String, String)> = Vec::new();
    if !is_valid_name(&body.name) {
        problems.push((
            "name".into(),
            "use 1-32 letters, digits, '_', '.' or '-'".into(),
        ));
    } else if upstreams.reserved.iter().any(|r| r == &body.name) {
        problems.push((
            "name".into(),
            format!(
                "{:?} is the name of one of the gateway's own upstreams",
                body.name
            ),
        ));
    }
    if let Err(problem) = upstreams.reach.check(&body.url, true).await {
        problems.push(("url".into(), problem));
    }
    if let Some(prefix) = &body.prefix
        && !(prefix.len() <= 32 && (prefix.is_empty() || is_valid_name(prefix)))
    {
        problems.push((
            "prefix".into(),
            "use at most 32 letters, digits, '_', '.' or '-'".into(),
        ));
    }
    problems.extend(credential_problems(&body.headers, body.bearer.as_deref()));
    for (field, globs) in [("allow", &body.allow), ("deny", &body.deny)] {
        for (i, glob) in globs.iter().enumerate() {
            if let Some(problem) = glob_problem(glob) {
                problems.push((format!("{field}/{i}"), problem));
            }
        }
    }
    let ceiling = upstreams.max_timeout_secs;
    let max_timeout_secs = body.max_timeout_secs.unwrap_or(ceiling);
    let timeout_secs = body
        .timeout_secs
        .unwrap_or(DEFAULT_TIMEOUT_SECS.min(max_timeout_secs));
    if !(1..=ceiling).contains(&max_timeout_secs) {
        problems.push(("max_timeout_secs".into(), format!("must be 1 to {ceiling}")));
    }
    if !(1..=max_timeout_secs).contains(&timeout_secs) {
        problems.push((
            "timeout_secs".into(),
            "must be 1 to max_timeout_secs".into(),
        ));
    }
    if body.progress_extends_ms == Some(0) {
        problems.push(("progress_extends_ms".into(), "must be at least 1".into()));
    }
    let openapi = http_document(&body, &mut problems, &upstreams.client);
    let prefix = body
        .prefix
        .clone()
        .unwrap_or_else(|| format!("{}__", body.name));
    problems.extend(
        toolgate_mcp::upstream::ToolOverride::problems(&body.overrides, &prefix)
            .into_iter()
            .map(|(field, message)| (format!("overrides/{field}"), message)),
    );
    if openapi.is_some() && body.personal_credentials {
        problems.push((
            "personal_credentials".into(),
            "apply to MCP servers; an HTTP API calls with the upstream's credentials".into(),
        ));
    }
    if openapi.is_some() && !body.overrides.is_empty() {
        problems.push((
            "overrides".into(),
            "apply to MCP servers' tools; an HTTP API's tools are named from its document".into(),
        ));
    }
    ToolError::unless_valid("the upstream is invalid", problems)?;
    let stored = Stored {
        url: body.url,
        prefix: body.prefix,
        allow: body.allow,
        deny: body.deny,
        timeout_secs,
        max_timeout_secs,
        progress_extends_ms: body.progress_extends_ms,
        header_names: body.headers.keys().cloned().collect(),
        bearer: body.bearer.is_some(),
        openapi,
        overrides: body.overrides,
        personal: body.personal_credentials,
    };
    let credentials = Credentials {
        headers: body.headers,
        bearer: body.bearer,
    };
    Ok((stored, credentials))
}

/// Problems with credentials to send: header names and values, a bearer token.
fn credential_problems(
    headers: &BTreeMap<String, String>,
    bearer: Option<&str>,
) -> Vec<(String, String)> {
    let mut problems = Vec::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if reqwest::header::HeaderName::from_bytes(name.as_bytes()).is_err() {
            problems.push((format!("headers/{name}"), "not a valid header name".into()));
        } else if RESERVED_HEADERS.contains(&lower.as_str()) {
            problems.push((
                format!("headers/{name}"),
                "set by the gateway itself (use `bearer` for Authorization)".into(),
            ));
        }
        if reqwest::header::HeaderValue::from_str(value).is_err() {
            problems.push((format!("headers/{name}"), "not a valid header value".into()));
        }
    }
    if let Some(bearer) = bearer
        && (bearer.is_empty() || reqwest::header::HeaderValue::from_str(bearer).is_err())
    {
        problems.push(("bearer".into(), "not a valid token".into()));
    }
    problems
}

/// The OpenAPI document of an HTTP API upstream (an endpoint's generated), checked by
/// making its tools; `None` for an MCP server. Problems join `problems`.
fn http_document(
    body: &UpstreamBody,
    problems: &mut Vec<(String, String)>,
    client: &reqwest::Client,
) -> Option<serde_json::Value> {
    let document = match (&body.openapi, &body.endpoint) {
        (None, None) => return None,
        (Some(_), Some(_)) => {
            problems.push((
                "endpoint".into(),
                "give an OpenAPI document or one endpoint, not both".into(),
            ));
            return None;
        }
        (Some(document), None) => document.clone(),
        (None, Some(endpoint)) => {
            let before = problems.len();
            if !toolgate_core::spec::is_valid_tool_name(&endpoint.tool) {
                problems.push((
                    "endpoint/tool".into(),
                    "use 1-64 letters, digits, '_', '.' or '-'".into(),
                ));
            }
            if !["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"]
                .contains(&endpoint.method.to_ascii_uppercase().as_str())
            {
                problems.push((
                    "endpoint/method".into(),
                    "GET, POST, PUT, PATCH, DELETE or HEAD".into(),
                ));
            }
            if endpoint.input_schema.get("type").and_then(|t| t.as_str()) != Some("object") {
                problems.push((
                    "endpoint/input_schema".into(),
                    "must be a JSON Schema of \"type\": \"object\"".into(),
                ));
            }
            if problems.len() > before {
                return None;
            }
            toolgate_tools::http_api::endpoint_document(
                &endpoint.tool,
                &endpoint.method,
                &endpoint.description,
                &endpoint.input_schema,
            )
        }
    };
    // Made once here to list what is wrong with it (the client is never used).
    let Ok(base) = url::Url::parse(&body.url) else {
        return Some(document);
    };
    let api = std::sync::Arc::new(toolgate_tools::http_api::HttpApi {
        base,
        headers: Default::default(),
        client: client.clone(),
        prefix: body
            .prefix
            .clone()
            .unwrap_or_else(|| format!("{}__", body.name)),
        default_timeout: std::time::Duration::from_secs(1),
        max_timeout: std::time::Duration::from_secs(1),
    });
    let field = if body.endpoint.is_some() {
        "endpoint"
    } else {
        "openapi"
    };
    match toolgate_tools::http_api::tools(&document, api, &|_| true) {
        Ok(parsed) => {
            let registry = toolgate_core::Registry::new();
            for tool in parsed.tools {
                let name = tool.remote_name.clone();
                if let Err(err) = registry.register(tool.into_tool()) {
                    problems.push((format!("{field}/{name}"), err.to_string()));
                }
            }
        }
        Err(toolgate_tools::http_api::Invalid(found)) => {
            problems.extend(
                found
                    .into_iter()
                    .map(|(at, why)| (format!("{field}{at}"), why)),
            );
        }
    }
    Some(document)
}

/// A body checked and ready to store: its name, its configuration without secrets, and
/// its credentials sealed.
async fn prepare(
    upstreams: &TenantUpstreams,
    caller: &Caller,
    body: UpstreamBody,
) -> Result<(String, serde_json::Value, Option<Vec<u8>>), ApiError> {
    let name = body.name.clone();
    let (stored, credentials) = validate(upstreams, body).await?;
    let (config, sealed) = sealed(upstreams, caller, &name, &stored, &credentials)?;
    Ok((name, config, sealed))
}

/// What to store: the body's name, its configuration and its sealed credentials.
fn sealed(
    upstreams: &TenantUpstreams,
    caller: &Caller,
    name: &str,
    stored: &Stored,
    credentials: &Credentials,
) -> Result<(serde_json::Value, Option<Vec<u8>>), ApiError> {
    let config = serde_json::to_value(stored).map_err(|e| ApiError::Internal(e.into()))?;
    let sealed = if credentials.is_empty() {
        None
    } else {
        Some(
            upstreams
                .sealer
                .seal(caller.auth.tenant, name, &stored.url, credentials)
                .map_err(ApiError::Internal)?,
        )
    };
    Ok((config, sealed))
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
    Ok(located(
        StatusCode::CREATED,
        &location,
        view(upstreams, record)?,
    ))
}

/// Read an upstream, with its connection status.
#[utoipa::path(get, path = "/v1/upstreams/{name}", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    responses(
        (status = 200, description = "The resource", body = UpstreamView),
        (status = 403, description = "Needs `tenant:admin`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such resource in your tenant", body = Problem, content_type = "application/problem+json"),
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
    Ok(AppJson(view(upstreams, record)?))
}

/// The credentials of upstream `old`, sealed again for its new name and URL (in
/// `config`, which learns which credentials it has); refused when the URL's origin
/// changed.
fn kept_credentials(
    upstreams: &TenantUpstreams,
    caller: &Caller,
    old: &toolgate_store::UpstreamRecord,
    new_name: &str,
    config: &mut serde_json::Value,
) -> Result<Option<Vec<u8>>, ApiError> {
    let before: Stored = serde_json::from_value(old.config.clone())
        .map_err(|e| ApiError::Internal(anyhow::anyhow!("stored upstream {}: {e}", old.name)))?;
    let mut after: Stored =
        serde_json::from_value(config.clone()).map_err(|e| ApiError::Internal(e.into()))?;
    let origin = |u: &str| url::Url::parse(u).ok().map(|u| u.origin());
    if origin(&before.url) != origin(&after.url) {
        return Err(ToolError::invalid_arguments(
            "credentials are kept only while the URL keeps its origin (scheme, host and port): send them again for the new server",
        )
        .into());
    }
    after.header_names = before.header_names;
    after.bearer = before.bearer;
    *config = serde_json::to_value(&after).map_err(|e| ApiError::Internal(e.into()))?;
    let Some(stored) = &old.credentials else {
        return Ok(None);
    };
    let credentials = upstreams
        .sealer
        .open(caller.auth.tenant, &old.name, &before.url, stored)
        .ok_or_else(|| {
            ApiError::Internal(anyhow::anyhow!(
                "the stored credentials of upstream {} do not open",
                old.name
            ))
        })?;
    upstreams
        .sealer
        .seal(caller.auth.tenant, new_name, &after.url, &credentials)
        .map(Some)
        .map_err(ApiError::Internal)
}

/// Delete an upstream: its tools go, its connection ends.
#[utoipa::path(delete, path = "/v1/upstreams/{name}", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 403, description = "Needs `tenant:admin`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such resource in your tenant", body = Problem, content_type = "application/problem+json"),
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
    Ok(StatusCode::NO_CONTENT)
}

/// The caller's tenant's upstream `name`, if it calls with each caller's own credential;
/// the caller needs `tools:invoke` (whoever calls its tools keeps their own credential).
async fn personal_upstream(
    app: &AppState,
    caller: &Caller,
    name: &str,
) -> Result<(std::sync::Arc<TenantUpstreams>, UpstreamRecord, Stored), ApiError> {
    caller.require(scopes::TOOLS_INVOKE)?;
    let upstreams = app.upstreams.clone().ok_or_else(|| {
        ApiError::from(ToolError::not_found(
            "tenant upstreams are disabled on this gateway (tenant_upstreams.enabled)",
        ))
    })?;
    let record = app
        .store
        .get_upstream(caller.auth.tenant, name)
        .await?
        .ok_or_else(|| not_found(name))?;
    let config = stored(&record)?;
    if !config.personal {
        return Err(ToolError::invalid_arguments(format!(
            "upstream {name:?} calls with its own credentials, not each caller's (personal_credentials)"
        ))
        .into());
    }
    Ok((upstreams, record, config))
}

/// What the caller stored for an upstream that calls with each caller's own credential
/// (names only: values are write-only).
#[utoipa::path(get, path = "/v1/upstreams/{name}/credentials", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    responses(
        (status = 200, description = "Stored", body = PersonalView),
        (status = 400, description = "The upstream calls with its own credentials", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tools:invoke`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such upstream, or nothing stored", body = Problem, content_type = "application/problem+json"),
    ))]
async fn get_my_credential(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
) -> Result<AppJson<PersonalView>, ApiError> {
    let (upstreams, record, config) = personal_upstream(&app, &caller, &name).await?;
    let credential = upstreams
        .personals
        .load(
            caller.auth.tenant,
            record.id,
            &record.name,
            &config.url,
            caller.auth.principal.id,
        )
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!(e)))?
        .ok_or_else(|| {
            ToolError::not_found(format!("you stored no credential for {name:?}")).with_suggestion(
                format!("store one with PUT /v1/upstreams/{name}/credentials"),
            )
        })?;
    Ok(AppJson(PersonalView {
        bearer: credential.bearer.is_some(),
        headers: credential.headers.into_keys().collect(),
    }))
}

/// Store the caller's own credential for an upstream that calls with each caller's
/// (replacing any before). Sealed at rest, bound to the caller, the upstream and its
/// URL; never returned, never logged.
#[utoipa::path(put, path = "/v1/upstreams/{name}/credentials", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    request_body(content = PersonalBody, content_type = "application/json"),
    responses(
        (status = 200, description = "Stored", body = PersonalView),
        (status = 400, description = "Invalid credential, or the upstream calls with its own", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tools:invoke`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such upstream in your tenant", body = Problem, content_type = "application/problem+json"),
    ))]
async fn put_my_credential(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
    AppJson(body): AppJson<PersonalBody>,
) -> Result<AppJson<PersonalView>, ApiError> {
    let (upstreams, record, config) = personal_upstream(&app, &caller, &name).await?;
    let mut problems = credential_problems(&body.headers, body.bearer.as_deref());
    if body.bearer.is_none() && body.headers.is_empty() {
        problems.push(("bearer".into(), "give a bearer token or headers".into()));
    }
    ToolError::unless_valid("the credential is invalid", problems)?;
    let credentials = Credentials {
        headers: body.headers,
        bearer: body.bearer,
    };
    upstreams
        .personals
        .put(
            caller.auth.tenant,
            (record.id, &record.name, &config.url),
            caller.auth.principal.id,
            &credentials,
        )
        .await
        // The store's errors keep their meaning (unavailable: 503); sealing's are ours.
        .map_err(|e| match e.downcast::<toolgate_store::StoreError>() {
            Ok(store) => ApiError::from(store),
            Err(other) => ApiError::Internal(other),
        })?;
    Ok(AppJson(PersonalView {
        bearer: credentials.bearer.is_some(),
        headers: credentials.headers.into_keys().collect(),
    }))
}

/// Forget the caller's own credential for an upstream: its calls are refused until it
/// stores another.
#[utoipa::path(delete, path = "/v1/upstreams/{name}/credentials", tag = "upstreams",
    params(("name" = String, Path, description = "Upstream name")),
    responses(
        (status = 204, description = "Forgotten"),
        (status = 400, description = "The upstream calls with its own credentials", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `tools:invoke`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such upstream, or nothing stored", body = Problem, content_type = "application/problem+json"),
    ))]
async fn delete_my_credential(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
) -> Result<StatusCode, ApiError> {
    let (upstreams, record, _) = personal_upstream(&app, &caller, &name).await?;
    let removed = upstreams
        .personals
        .delete(caller.auth.tenant, record.id, caller.auth.principal.id)
        .await?;
    if removed {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ToolError::not_found(format!("you stored no credential for {name:?}")).into())
    }
}

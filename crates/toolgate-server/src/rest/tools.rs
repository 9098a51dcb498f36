//! `/v1/tools`: list, describe and invoke tools. Each handler turns its input into one
//! typed call, hands it to the executor or the caller's toolset, and maps the result.

use std::num::NonZeroU64;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_core::cache::{CacheMode, CacheStatus};
use toolgate_core::declarations::{self, DeclarationFormat};
use toolgate_core::stores::ApprovalStatus;
use toolgate_core::{Adapter, CallContext, CallId, RegisteredTool, Risk, ToolError, ToolSpec};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, Problem};
use super::extract::{
    AppJson, AppPath, AppQuery, CallOrigin, DEFAULT_PAGE, MAX_PAGE, bounded, located,
};
use crate::auth::Caller;
pub use crate::outcome::InvokeResponse;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_tools))
        .routes(routes!(get_tool))
        .routes(routes!(invoke_tool))
}

/// A tool as listed to callers.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "name": "read_file",
    "title": "Read file",
    "description": "Read a text file from the workspace.",
    "category": "workspace",
    "risk": "low",
    "effects": {"writes": false, "destructive": false, "idempotent": true, "open_world": false},
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    "default_timeout_ms": 30000,
    "max_timeout_ms": 120000,
    "available": true
}))]
pub struct ToolInfo {
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    pub description: String,
    pub category: String,
    pub risk: RiskLevel,
    pub effects: EffectsInfo,
    /// JSON Schema of the `arguments` object.
    #[schema(value_type = Object)]
    pub input_schema: Value,
    /// JSON Schema of the `structured` result, when the tool returns one.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output_schema: Option<Value>,
    /// Deadline when the caller asks for none.
    pub default_timeout_ms: u64,
    /// Longest deadline a caller may ask for; longer requests are clamped.
    pub max_timeout_ms: u64,
    /// Scope needed beyond `tools:invoke`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub required_scope: Option<String>,
    /// False while the tool's upstream MCP server is away (being reconnected): calls
    /// fail as `upstream` errors until it is back.
    pub available: bool,
}

#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RiskLevel {
    Low,
    Medium,
    High,
}

/// What a call does to the world.
#[derive(Debug, Serialize, ToSchema)]
pub struct EffectsInfo {
    pub writes: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl ToolInfo {
    fn of(tool: &RegisteredTool) -> Self {
        Self {
            available: tool.available(),
            ..Self::from(tool.spec())
        }
    }
}

impl From<&ToolSpec> for ToolInfo {
    fn from(spec: &ToolSpec) -> Self {
        Self {
            name: spec.name.clone(),
            title: spec.title.clone(),
            description: spec.description.clone(),
            category: spec.category.clone(),
            risk: match spec.risk {
                Risk::Low => RiskLevel::Low,
                Risk::Medium => RiskLevel::Medium,
                Risk::High => RiskLevel::High,
            },
            effects: EffectsInfo {
                writes: spec.effects.writes,
                destructive: spec.effects.destructive,
                idempotent: spec.effects.idempotent,
                open_world: spec.effects.open_world,
            },
            input_schema: spec.input_schema.clone(),
            output_schema: spec.output_schema.clone(),
            default_timeout_ms: millis(spec.default_timeout),
            max_timeout_ms: millis(spec.max_timeout),
            required_scope: spec.required_scope.clone(),
            available: true,
        }
    }
}

/// One page of the caller's tools.
#[derive(Debug, Serialize, ToSchema)]
pub struct ToolList {
    pub tools: Vec<ToolInfo>,
    /// Pass as `cursor` to get the next page; absent on the last page.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A provider's tool-declaration format.
#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `[{"type":"function","function":{name, description, parameters}}]` (also Ollama, OpenRouter, vLLM)
    Openai,
    /// `[{name, description, input_schema}]`
    Anthropic,
    /// `[{"functionDeclarations":[{name, description, parameters}]}]`
    Gemini,
    /// `[{name, title, description, inputSchema, outputSchema, annotations}]`
    Mcp,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Opaque cursor from a previous page's `next_cursor`.
    cursor: Option<String>,
    /// Page size, 1–500 (default 100). Ignored with `format`.
    #[param(minimum = 1, maximum = 500)]
    limit: Option<usize>,
    /// Only tools of this category (e.g. `workspace`, `diagnostics`).
    category: Option<String>,
    /// Return the whole toolset as this provider's tool declarations instead of a page.
    format: Option<Format>,
}

/// List the tools the caller may call.
///
/// Sorted by name and cursor-paginated. With `format`, returns the whole (category-
/// filtered) toolset as that provider's tool declarations, ready to paste into a request.
#[utoipa::path(
    get,
    path = "/v1/tools",
    tag = "tools",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of tools, or with `format` the provider's declarations (a JSON array)", body = ToolList),
        (status = 400, description = "Bad query parameter", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn list_tools(
    State(app): State<AppState>,
    caller: Caller,
    AppQuery(query): AppQuery<ListQuery>,
) -> Result<Response, ApiError> {
    let mut tools = caller.tools(&app.registry).list();
    if let Some(category) = &query.category {
        tools.retain(|t| &t.spec().category == category);
    }
    if let Some(format) = query.format {
        let format = match format {
            Format::Openai => DeclarationFormat::Openai,
            Format::Anthropic => DeclarationFormat::Anthropic,
            Format::Gemini => DeclarationFormat::Gemini,
            Format::Mcp => DeclarationFormat::Mcp,
        };
        let rendered = declarations::render(format, tools.iter().map(|t| t.spec()));
        return Ok(AppJson(rendered).into_response());
    }
    let limit = bounded("limit", query.limit, DEFAULT_PAGE, 1..=MAX_PAGE)?;
    if let Some(cursor) = &query.cursor {
        tools.retain(|t| t.spec().name.as_str() > cursor.as_str());
    }
    let next_cursor = (tools.len() > limit).then(|| tools[limit - 1].spec().name.clone());
    tools.truncate(limit);
    let page = ToolList {
        tools: tools.iter().map(|t| ToolInfo::of(t)).collect(),
        next_cursor,
    };
    Ok(AppJson(page).into_response())
}

/// Describe one tool.
#[utoipa::path(
    get,
    path = "/v1/tools/{name}",
    tag = "tools",
    params(("name" = String, Path, description = "Tool name", example = "read_file")),
    responses(
        (status = 200, description = "The tool", body = ToolInfo),
        (status = 404, description = "No such tool in the caller's toolset", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn get_tool(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(name): AppPath<String>,
) -> Result<AppJson<ToolInfo>, ApiError> {
    let tool = caller.tools(&app.registry).get(&name).ok_or_else(|| {
        ToolError::not_found(format!("no tool named {name:?} is available to you"))
    })?;
    Ok(AppJson(ToolInfo::of(&tool)))
}

/// A tool call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"arguments": {"path": "README.md", "limit": 20}, "timeout_ms": 5000}))]
pub struct InvokeRequest {
    /// The tool's arguments, checked against its `input_schema`.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub arguments: serde_json::Map<String, Value>,
    /// Deadline for this call in milliseconds; at most the tool's `max_timeout_ms`
    /// (longer requests are clamped), the tool's default when absent.
    #[schema(value_type = Option<u64>, minimum = 1)]
    pub timeout_ms: Option<NonZeroU64>,
}

/// A call held for a person's approval.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "call_id": "01936f0e-1111-7c11-8d2f-0a4b5c6d7e8f",
    "status": "awaiting_approval",
    "approval_id": "01936f0e-9b7a-7c11-8d2f-0a4b5c6d7e8f",
    "status_url": "/v1/calls/01936f0e-1111-7c11-8d2f-0a4b5c6d7e8f",
    "expires_in_secs": 3600,
    "detail": "calling execute_command needs a person's approval first; approval 01936f0e-9b7a-7c11-8d2f-0a4b5c6d7e8f is pending"
}))]
pub struct HeldCall {
    pub call_id: String,
    /// `awaiting_approval`.
    pub status: &'static str,
    pub approval_id: String,
    /// Where the call's outcome appears once it is approved and has run.
    pub status_url: String,
    /// Seconds until the approval expires (and the call counts as denied).
    pub expires_in_secs: u64,
    pub detail: String,
}

/// Longest `Prefer: wait=N` honoured, in seconds.
const MAX_WAIT_SECS: u64 = 300;
/// Longest a waiting request goes without looking at the call's approval: it looks when
/// the store announces a change to the tenant's approvals, and this bounds the cost of
/// one missed.
const WAIT_FALLBACK: Duration = Duration::from_secs(5);

/// `Prefer: wait=N` (RFC 7240), capped at [`MAX_WAIT_SECS`].
fn preferred_wait(headers: &HeaderMap) -> Option<u64> {
    headers
        .get_all("prefer")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|p| p.trim().strip_prefix("wait="))
        .find_map(|n| n.trim().parse::<u64>().ok())
        .map(|n| n.min(MAX_WAIT_SECS))
}

/// Call a tool.
///
/// The call goes through the executor like every call from every front door: schema
/// validation (every violation listed with its JSON pointer), authorization, the tenant's
/// approval policy, the deadline, output truncation and events. Errors are
/// `application/problem+json` with a stable `type` per category.
///
/// A call the policy holds for a person's approval answers `202 Accepted` with the
/// approval id and a status URL (`GET /v1/calls/{call_id}`, also in `Location`) that
/// holds the outcome once someone approves and the call has run. With
/// `Prefer: wait=N` (N ≤ 300) the request waits up to N seconds for that outcome and
/// answers with it directly (a denial is a 403 `denied` problem with the reason). A wait
/// counts as an open stream (`http.max_streams_per_principal`, `_per_tenant`): past those
/// caps the 202 comes at once, without `Preference-Applied`.
///
/// A tool whose results the operator or the tenant's policy caches (read-only,
/// idempotent tools only) may be answered from the cache after the same checks; the
/// answer's `Cache-Status` header says so (`toolgate; hit`). `Cache-Control: no-cache`
/// asks for a fresh result, `no-store` for one that is not kept either.
#[utoipa::path(
    post,
    path = "/v1/tools/{name}/invoke",
    tag = "tools",
    params(
        ("name" = String, Path, description = "Tool name", example = "read_file"),
        ("Cache-Control" = Option<String>, Header, description = "`no-cache`: the tool runs even if a result is cached (and the new result is kept); `no-store`: it runs and nothing is kept"),
    ),
    request_body(content = InvokeRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "The tool ran, or a cached result answered", body = InvokeResponse,
            headers(("Cache-Status" = String, description = "For a cached tool (RFC 9211): `toolgate; hit`, `toolgate; fwd=miss; stored` or `toolgate; fwd=request`"))),
        (status = 202, description = "The call waits for a person's approval", body = HeldCall),
        (status = 400, description = "Malformed body, or arguments violating the tool's schema (each violation listed), or a path outside the workspace", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks a needed scope, or policy (or a person) denied the call", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such tool in the caller's toolset, or the tool found nothing at the given path", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than the configured limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body not sent as application/json", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "Rate limited", body = Problem, content_type = "application/problem+json"),
        (status = 502, description = "An upstream the tool depends on failed", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "The call was cancelled (the gateway is shutting down)", body = Problem, content_type = "application/problem+json"),
        (status = 504, description = "The tool did not finish within its deadline", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    )
)]
async fn invoke_tool(
    State(app): State<AppState>,
    caller: Caller,
    CallOrigin { client, parent }: CallOrigin,
    headers: HeaderMap,
    AppPath(name): AppPath<String>,
    AppJson(body): AppJson<InvokeRequest>,
) -> Result<Response, ApiError> {
    let mut ctx = CallContext::new(caller.auth.clone(), Adapter::Rest)
        .with_request_id(&*caller.request_id)
        .continuing(parent)
        .with_timeout(body.timeout_ms.map(|ms| Duration::from_millis(ms.get())))
        .with_client(client)
        .with_cache(cache_mode(&headers));
    ctx.subject_token = caller.subject_token.clone();
    let call_id = ctx.call_id;
    let tools = caller.tools(&app.registry);
    match app
        .executor
        .call(&tools, ctx, &name, Value::Object(body.arguments))
        .await
    {
        Ok(done) => {
            let status = done.cache.map(cache_status);
            let mut response = AppJson(InvokeResponse::from(done)).into_response();
            if let Some(status) = status {
                response
                    .headers_mut()
                    .insert("cache-status", HeaderValue::from_static(status));
            }
            Ok(response)
        }
        Err(err) if err.awaiting_approval.is_some() => {
            held(&app, &caller, call_id, err, preferred_wait(&headers)).await
        }
        Err(err) => Err(err.into()),
    }
}

/// How the caller lets the cache answer (`Cache-Control: no-cache` for a fresh result,
/// `no-store` for one not kept either).
fn cache_mode(headers: &HeaderMap) -> CacheMode {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(CacheMode::from_cache_control)
        .max_by_key(|mode| *mode as u8)
        .unwrap_or_default()
}

/// The `Cache-Status` (RFC 9211) of a call of a cached tool.
fn cache_status(status: CacheStatus) -> &'static str {
    match status {
        CacheStatus::Hit => "toolgate; hit",
        CacheStatus::Miss => "toolgate; fwd=miss; stored",
        CacheStatus::Bypass => "toolgate; fwd=request",
    }
}

/// The answer to a call held for approval: its outcome if it comes within the wait the
/// client asked for, else 202 with where to find it.
async fn held(
    app: &AppState,
    caller: &Caller,
    call_id: CallId,
    err: ToolError,
    wait: Option<u64>,
) -> Result<Response, ApiError> {
    let Some(hold) = err.awaiting_approval else {
        return Err(err.into());
    };
    let status_url = format!("/v1/calls/{call_id}");
    // A wait holds a connection as long as a stream does, so it counts against the same
    // caps; past them the preference is not applied (RFC 7240 lets a server ignore it)
    // and the held call is answered at once, without `Preference-Applied`.
    let ticket = wait.and_then(|_| {
        app.streams
            .admit(&caller.auth, toolgate_core::Adapter::Rest)
            .ok()
    });
    let wait = wait.filter(|_| ticket.is_some());
    if let Some(secs) = wait {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
        // Watching before the first read, so a decision between the two is not missed.
        let mut changes = app.store.watch_changes().await?;
        loop {
            let Some(record) = app
                .store
                .approval_for_call(caller.auth.tenant, call_id)
                .await?
            else {
                break;
            };
            let now = chrono::Utc::now();
            match record.effective_status(now) {
                ApprovalStatus::Pending => {}
                ApprovalStatus::Approved => {
                    if let Some(result) = &record.result {
                        return Ok(stored_outcome(result));
                    }
                }
                _ => {
                    return Err(toolgate_core::policy::denied(
                        &record.tool,
                        record.id,
                        record.reason.as_deref().unwrap_or_default(),
                        record.decided_by_name.as_deref(),
                    )
                    .into());
                }
            }
            // Until the tenant's approvals change, this one expires, or the wait is over;
            // at most WAIT_FALLBACK between looks, whatever was announced.
            let expiry = (record.expires_at - now).to_std().unwrap_or_default();
            let look = (tokio::time::Instant::now() + expiry.min(WAIT_FALLBACK)).min(deadline);
            let announced = tokio::select! {
                () = changes.approvals_of(caller.auth.tenant) => true,
                () = tokio::time::sleep_until(look) => false,
            };
            if !announced && look >= deadline {
                break;
            }
        }
    }
    let held = HeldCall {
        call_id: call_id.to_string(),
        status: "awaiting_approval",
        approval_id: hold.approval.to_string(),
        status_url: status_url.clone(),
        expires_in_secs: hold.expires_in.as_secs(),
        detail: err.message,
    };
    let mut response = located(StatusCode::ACCEPTED, &status_url, held);
    if let Some(secs) = wait
        && let Ok(v) = HeaderValue::from_str(&format!("wait={secs}"))
    {
        response.headers_mut().insert("preference-applied", v);
    }
    Ok(response)
}

/// The response a call run after approval would have given: `{status, body}` as stored.
fn stored_outcome(result: &Value) -> Response {
    let status = result["status"]
        .as_u64()
        .and_then(|s| StatusCode::from_u16(u16::try_from(s).ok()?).ok())
        .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(result["body"].clone())).into_response();
    if !status.is_success() {
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/problem+json"),
        );
    }
    response
}

//! `/v1/agents`: a tenant's agents (create, list, read, replace, delete) and starting
//! runs of them. Managing agents needs `agents:manage`; reading them and starting runs
//! needs `agents:run`.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolgate_agent::AgentConfig;
use toolgate_core::ToolError;
use toolgate_core::auth::scopes;
use toolgate_store::AgentRecord;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::changes;
use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppPath, located};
use super::runs::{RunView, run_view};
use crate::auth::Caller;
use crate::state::AppState;
use toolgate_agent::runs::StartError;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_agents, create_agent))
        .routes(routes!(get_agent, replace_agent, delete_agent))
        .routes(routes!(start_run))
}

/// Longest a start request may wait for the run to end.
const MAX_WAIT_SECS: u64 = 300;
/// When a tenant with all the runs it may start is told to try again.
const RUNS_RETRY_AFTER_SECS: u64 = 5;

/// An agent: a named model, prompt and toolset.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "id": "01936f0e-9b7a-7c11-8d2f-0a4b5c6d7e8f",
    "name": "researcher",
    "provider": "openai",
    "model": "gpt-4.1-mini",
    "system_prompt": "You answer questions about the workspace.",
    "tools": ["read_file", "search_files"],
    "categories": [],
    "protocol": "native",
    "max_turns": 10,
    "parallel_tool_calls": true,
    "repetition_limit": 3,
    "created_at": "2026-11-22T10:00:00Z",
    "updated_at": "2026-11-22T10:00:00Z"
}))]
pub struct AgentView {
    pub id: Uuid,
    #[serde(flatten)]
    #[schema(inline)]
    pub config: AgentConfig,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// The stored agent's configuration; stored data that no longer reads is an internal error.
fn config_of(record: &AgentRecord) -> Result<AgentConfig, ApiError> {
    serde_json::from_value(record.config.clone()).map_err(|e| {
        ApiError::Internal(anyhow::anyhow!(
            "stored agent {} is unreadable: {e}",
            record.id
        ))
    })
}

fn view(record: AgentRecord) -> Result<AgentView, ApiError> {
    let config = config_of(&record)?;
    Ok(AgentView {
        id: record.id,
        config,
        created_at: record.created_at,
        updated_at: record.updated_at,
    })
}

/// Checks a configuration, listing every problem; a provider the gateway lacks is one.
fn validate(app: &AppState, config: &AgentConfig) -> Result<(), ApiError> {
    let mut problems = config.problems();
    if !config.provider.is_empty() && !app.runs.has_provider(&config.provider) {
        problems.push((
            "provider".into(),
            format!("this gateway has no provider named {:?}", config.provider),
        ));
    }
    if let Some(fast) = &config.fast_provider
        && !app.runs.has_provider(fast)
    {
        problems.push((
            "fast_provider".into(),
            format!("this gateway has no provider named {fast:?}"),
        ));
    }
    Ok(ToolError::unless_valid(
        "the agent's configuration is invalid",
        problems,
    )?)
}

fn not_found(id: Uuid) -> ApiError {
    ToolError::not_found(format!("no agent {id} in your tenant")).into()
}

/// Reading agents needs `agents:run` or `agents:manage`.
fn require_read(caller: &Caller) -> Result<(), ApiError> {
    if caller.auth.has_scope(scopes::AGENTS_MANAGE) {
        return Ok(());
    }
    caller.require(scopes::AGENTS_RUN)
}

/// The caller's tenant's agent `id`, or 404.
async fn find_agent(app: &AppState, caller: &Caller, id: Uuid) -> Result<AgentRecord, ApiError> {
    app.store
        .get_agent(caller.auth.tenant, id)
        .await?
        .ok_or_else(|| not_found(id))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AgentList {
    pub agents: Vec<AgentView>,
}

/// List the tenant's agents.
#[utoipa::path(get, path = "/v1/agents", tag = "agents",
    responses(
        (status = 200, description = "The resource", body = AgentList),
        (status = 403, description = "Needs `agents:run` or `agents:manage`", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    ))]
async fn list_agents(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<AppJson<AgentList>, ApiError> {
    require_read(&caller)?;
    let agents = app
        .store
        .list_agents(caller.auth.tenant)
        .await?
        .into_iter()
        .map(view)
        .collect::<Result<_, _>>()?;
    Ok(AppJson(AgentList { agents }))
}

/// Create an agent.
#[utoipa::path(post, path = "/v1/agents", tag = "agents",
    request_body(content = AgentConfig, content_type = "application/json"),
    responses(
        (status = 201, description = "Created", body = AgentView),
        (status = 400, description = "Invalid configuration (every problem listed)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `agents:manage`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "An agent of this name exists, or the tenant keeps as many agents as it may (`limits.tenant_agents`)", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
async fn create_agent(
    State(app): State<AppState>,
    caller: Caller,
    AppJson(config): AppJson<AgentConfig>,
) -> Result<Response, ApiError> {
    caller.require(scopes::AGENTS_MANAGE)?;
    validate(&app, &config)?;
    let value = serde_json::to_value(&config).map_err(|e| ApiError::Internal(e.into()))?;
    let record = app
        .store
        .create_agent(caller.auth.tenant, &config.name, &value)
        .await?;
    let change = json!({"id": record.id, "config": value});
    changes::record(&app, &caller, "agents.create", change).await?;
    let location = format!("/v1/agents/{}", record.id);
    Ok(located(StatusCode::CREATED, &location, view(record)?))
}

/// Read an agent.
#[utoipa::path(get, path = "/v1/agents/{id}", tag = "agents",
    params(("id" = Uuid, Path, description = "Agent id")),
    responses(
        (status = 200, description = "The resource", body = AgentView),
        (status = 404, description = "No such resource in your tenant", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    ))]
async fn get_agent(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<Uuid>,
) -> Result<AppJson<AgentView>, ApiError> {
    require_read(&caller)?;
    let record = find_agent(&app, &caller, id).await?;
    Ok(AppJson(view(record)?))
}

/// Replace an agent's configuration. Runs already started keep the configuration they
/// started with.
#[utoipa::path(put, path = "/v1/agents/{id}", tag = "agents",
    params(("id" = Uuid, Path, description = "Agent id")),
    request_body(content = AgentConfig, content_type = "application/json"),
    responses(
        (status = 200, description = "The resource", body = AgentView),
        (status = 400, description = "Malformed request or invalid configuration (every problem listed)", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such resource in your tenant", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Conflicts with the current state", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
async fn replace_agent(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<Uuid>,
    AppJson(config): AppJson<AgentConfig>,
) -> Result<AppJson<AgentView>, ApiError> {
    caller.require(scopes::AGENTS_MANAGE)?;
    validate(&app, &config)?;
    let value = serde_json::to_value(&config).map_err(|e| ApiError::Internal(e.into()))?;
    if !app
        .store
        .update_agent(caller.auth.tenant, id, &config.name, &value)
        .await?
    {
        return Err(not_found(id));
    }
    let change = json!({"id": id, "config": value});
    changes::record(&app, &caller, "agents.update", change).await?;
    let record = find_agent(&app, &caller, id).await?;
    Ok(AppJson(view(record)?))
}

/// Delete an agent. Its runs stay readable.
#[utoipa::path(delete, path = "/v1/agents/{id}", tag = "agents",
    params(("id" = Uuid, Path, description = "Agent id")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 404, description = "No such resource in your tenant", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
async fn delete_agent(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    caller.require(scopes::AGENTS_MANAGE)?;
    if app.store.delete_agent(caller.auth.tenant, id).await? {
        let change = json!({"id": id});
        changes::record(&app, &caller, "agents.delete", change).await?;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found(id))
    }
}

/// A run to start.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"input": "Which files mention 'retry'?", "wait_secs": 60}))]
pub struct StartRun {
    /// The user's message to the agent.
    pub input: String,
    /// Wait up to this many seconds (at most 300) for the run to end before answering;
    /// 0 or absent answers at once with the run still going. A wait counts against the
    /// caller's open streams: past their cap the run is answered at once.
    #[serde(default)]
    pub wait_secs: u64,
}

/// Start a run of an agent.
///
/// Answers 201 with the run (and `Location: /v1/runs/{id}`) as soon as it is recorded,
/// or, with `wait_secs`, once it has ended or the wait is over. Follow it live at
/// `GET /v1/runs/{id}/events`. A tenant with `limits.tenant_runs` runs going on the
/// instance gets 429 with `Retry-After`.
#[utoipa::path(post, path = "/v1/agents/{id}/runs", tag = "runs",
    params(("id" = Uuid, Path, description = "Agent id")),
    request_body(content = StartRun, content_type = "application/json"),
    responses(
        (status = 201, description = "The run, still running or (with `wait_secs`) ended", body = RunView),
        (status = 400, description = "Malformed request or invalid configuration (every problem listed)", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `agents:run`", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such resource in your tenant", body = Problem, content_type = "application/problem+json"),
        (status = 429, description = "The tenant has as many runs going on this instance as it may start (`Retry-After`)", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
async fn start_run(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<Uuid>,
    AppJson(body): AppJson<StartRun>,
) -> Result<Response, ApiError> {
    caller.require(scopes::AGENTS_RUN)?;
    if body.input.trim().is_empty() {
        return Err(ApiError::Malformed("input must not be empty".into()));
    }
    if body.wait_secs > MAX_WAIT_SECS {
        return Err(ApiError::Malformed(format!(
            "wait_secs must be at most {MAX_WAIT_SECS}"
        )));
    }
    let record = find_agent(&app, &caller, id).await?;
    let config = config_of(&record)?;
    let tenant = caller.auth.tenant;
    let run = app
        .runs
        .start(
            caller.auth.clone(),
            record.id,
            config,
            body.input,
            Some(caller.request_id.to_string()),
        )
        .await
        .map_err(|e| match e {
            StartError::UnknownProvider(_) | StartError::InvalidAgent(_) => {
                ApiError::Tool(ToolError::invalid_arguments(e.to_string()))
            }
            StartError::Busy(message) => {
                app.executor.metrics().rejected(
                    tenant,
                    toolgate_core::limits::Limit::TenantRuns,
                    toolgate_core::Adapter::Rest,
                );
                ApiError::Tool(
                    ToolError::new(toolgate_core::ErrorKind::RateLimited, message)
                        .with_retry_after(Duration::from_secs(RUNS_RETRY_AFTER_SECS), false),
                )
            }
            StartError::Store(e) => e.into(),
        })?;
    // A wait holds a connection as long as a stream does, so it counts against the same
    // caps; past them the run is answered at once, as it stands.
    let ticket = (body.wait_secs > 0)
        .then(|| {
            app.streams
                .admit(&caller.auth, toolgate_core::Adapter::Rest)
                .ok()
        })
        .flatten();
    if ticket.is_some() {
        let mut updates = app.runs.subscribe(run);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(body.wait_secs);
        // This instance drives the run and says when it ends; the store is asked once a
        // second in case another instance took it over.
        let mut check = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                changed = updates.changed() => {
                    if changed.is_err() || updates.borrow().finished {
                        break;
                    }
                }
                _ = check.tick() => {
                    let current = app.store.get_run(tenant, run).await?;
                    if current.is_none_or(|r| r.status != toolgate_core::stores::RunStatus::Running) {
                        break;
                    }
                }
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
    }
    let view = run_view(&app, &caller, run, 0).await?;
    Ok(located(
        StatusCode::CREATED,
        &format!("/v1/runs/{run}"),
        view,
    ))
}

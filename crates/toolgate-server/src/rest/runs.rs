//! `/v1/runs`: agent runs as they happen and afterwards — status, final output, steps
//! (the run's journal: model messages, tool calls, notes), usage — plus a live SSE
//! stream of the steps that resumes from `Last-Event-ID`, and cancellation. Needs
//! `agents:run`; a tenant sees only its own runs.

use std::convert::Infallible;
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures::Stream;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_core::auth::scopes;
use toolgate_core::stores::{RunStatus, sees_every_run};
use toolgate_core::{RunId, TenantId, ToolError};
use toolgate_store::runs::STEPS_PER_READ;
use toolgate_store::{Page, RunEventRecord, RunFilter, RunRecord};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppPath, AppQuery, before, bounded, next_cursor};
use crate::auth::Caller;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_runs))
        .routes(routes!(get_run))
        .routes(routes!(run_events))
        .routes(routes!(cancel_run))
}

/// Longest an SSE stream goes without looking at the store: it looks when this instance
/// commits a step of the run, when the store announces one committed by another
/// instance, and this bounds the cost of an announcement missed.
const FALLBACK: Duration = Duration::from_secs(5);

/// A run with its steps.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "id": "01936f0e-9b7a-7c11-8d2f-0a4b5c6d7e8f",
    "agent_id": "01936f0e-0000-7c11-8d2f-0a4b5c6d7e8f",
    "agent_name": "researcher",
    "status": "completed",
    "input": "Which files mention 'retry'?",
    "output": "Two: src/http.rs and README.md.",
    "best_effort": false,
    "usage": {"input_tokens": 812, "output_tokens": 95, "cached_input_tokens": 0, "reasoning_tokens": 0},
    "created_at": "2026-11-22T10:00:00Z",
    "finished_at": "2026-11-22T10:00:04Z",
    "steps": [
        {"seq": 1, "type": "run_started", "agent": "researcher", "input": "Which files mention 'retry'?", "at": "2026-11-22T10:00:00Z"},
        {"seq": 2, "type": "turn_started", "turn": 1, "at": "2026-11-22T10:00:00Z"}
    ]
}))]
pub struct RunView {
    pub id: Uuid,
    pub agent_id: Uuid,
    pub agent_name: String,
    /// `running`, `completed`, `failed` or `cancelled`.
    pub status: String,
    pub input: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// The answer as JSON, when the agent has an `output_schema` and the run completed
    /// (it matches the schema).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub output_json: Option<Value>,
    /// The answer was forced (turn limit, persisting repetition) from what was gathered.
    pub best_effort: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Token counts over all model calls, once the run has ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<toolgate_core::Usage>,
    pub created_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<DateTime<Utc>>,
    /// The run's journal, in order (omitted in listings).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Vec<Object>>)]
    pub steps: Option<Vec<Value>>,
    /// More steps follow these (a run's steps come about 4 MiB, or 1,000 steps, at a
    /// time): ask again with `after` set to the last one's `seq` (omitted in listings).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub more_steps: Option<bool>,
}

fn summary(r: RunRecord, steps: Option<Page<Value>>) -> RunView {
    // A completed run of an agent with an output schema ended on an answer the loop
    // checked against it (the agent as it was when the run started).
    let structured = r.status == RunStatus::Completed
        && r.agent_config
            .get("output_schema")
            .is_some_and(|s| !s.is_null());
    let output_json = r
        .output
        .as_deref()
        .filter(|_| structured)
        .and_then(|o| serde_json::from_str(o).ok());
    RunView {
        output_json,
        id: r.id.0,
        agent_id: r.agent_id,
        agent_name: r.agent_name,
        status: r.status.as_str().to_owned(),
        input: r.input,
        output: r.output,
        best_effort: r.best_effort,
        error: r.error,
        usage: r.usage,
        created_at: r.created_at,
        finished_at: r.finished_at,
        more_steps: steps.as_ref().map(|p| p.more),
        steps: steps.map(|p| p.items),
    }
}

/// One journal entry as a step: its number, type, fields and time, with the tool calls'
/// secret arguments masked as the audit masks them (the journal keeps them whole: a run
/// resumed after an approval makes its call again with them).
fn step(app: &AppState, tenant: TenantId, e: RunEventRecord) -> Value {
    let mut v = e.payload;
    app.runs.mask_secrets(tenant, &e.kind, &mut v);
    if let Value::Object(map) = &mut v {
        map.insert("seq".into(), Value::from(e.seq));
        map.insert("at".into(), Value::String(e.created_at.to_rfc3339()));
    }
    v
}

fn not_found(run: RunId) -> ApiError {
    ToolError::not_found(format!("no run {run} in your tenant")).into()
}

/// The run `run` of the caller's tenant, if the caller may see it (else 404; see
/// [`RunRecord::is_visible_to`]).
async fn visible_run(app: &AppState, caller: &Caller, run: RunId) -> Result<RunRecord, ApiError> {
    app.store
        .get_run(caller.auth.tenant, run)
        .await?
        .filter(|record| record.is_visible_to(&caller.auth))
        .ok_or_else(|| not_found(run))
}

/// The run with its steps after step `after`, as many as one read returns, if the
/// caller may see it.
pub async fn run_view(
    app: &AppState,
    caller: &Caller,
    run: RunId,
    after: i64,
) -> Result<RunView, ApiError> {
    let record = visible_run(app, caller, run).await?;
    let tenant = caller.auth.tenant;
    let steps = app
        .store
        .run_steps(tenant, run, after, STEPS_PER_READ)
        .await?;
    Ok(summary(record, Some(steps.map(|e| step(app, tenant, e)))))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ListRunsQuery {
    /// Only runs in this status: `running`, `awaiting_approval`, `completed`, `failed`,
    /// `cancelled`, or `all` (the default).
    #[param(example = "failed")]
    status: Option<String>,
    /// Opaque cursor from a previous page's `next_cursor`.
    cursor: Option<String>,
    /// At most this many, newest first (1–500, default 50).
    limit: Option<i64>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct RunList {
    pub runs: Vec<RunView>,
    /// More runs are there than these: the list stopped at `limit`, or once its runs held
    /// about 4 MiB of inputs, outputs and agent configurations.
    pub more: bool,
    /// Pass as `cursor` (with the same `status`) for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// List runs, newest first (without their steps), a page at a time: those the caller
/// started, or with `audit:read` every run of the tenant.
#[utoipa::path(get, path = "/v1/runs", tag = "runs", params(ListRunsQuery),
    responses(
        (status = 200, description = "The resource", body = RunList),
        (status = 400, description = "Unknown status, bad cursor or bad limit", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "Needs `agents:run`", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    ))]
async fn list_runs(
    State(app): State<AppState>,
    caller: Caller,
    AppQuery(query): AppQuery<ListRunsQuery>,
) -> Result<AppJson<RunList>, ApiError> {
    caller.require(scopes::AGENTS_RUN)?;
    let status = match query.status.as_deref().unwrap_or("all") {
        "all" => None,
        s => Some(RunStatus::parse(s).ok_or_else(|| {
            ApiError::Malformed(format!(
                "status {s:?} is not one of running, awaiting_approval, completed, failed, cancelled, all"
            ))
        })?),
    };
    let before = before(query.cursor.as_deref())?;
    let limit = bounded("limit", query.limit, 50, 1..=500)?;
    let filter = RunFilter {
        principal: (!sees_every_run(&caller.auth)).then_some(caller.auth.principal.id),
        status,
    };
    let page = app
        .store
        .list_runs(caller.auth.tenant, filter, before, limit)
        .await?;
    let next_cursor = page.next().map(next_cursor);
    Ok(AppJson(RunList {
        runs: page.items.into_iter().map(|r| summary(r, None)).collect(),
        more: page.more,
        next_cursor,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct GetRunQuery {
    /// Only the steps after this one (default 0: from the first).
    after: Option<i64>,
}

/// A run: status, final output, usage and its steps so far (about 4 MiB or 1,000 steps
/// at a time; `more_steps` says when to ask again with `after`).
#[utoipa::path(get, path = "/v1/runs/{id}", tag = "runs",
    params(("id" = Uuid, Path, description = "Run id"), GetRunQuery),
    responses(
        (status = 200, description = "The resource", body = RunView),
        (status = 404, description = "No such run in your tenant, or one another principal started (seeing those needs `audit:read`)", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    ))]
async fn get_run(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<Uuid>,
    AppQuery(query): AppQuery<GetRunQuery>,
) -> Result<AppJson<RunView>, ApiError> {
    caller.require(scopes::AGENTS_RUN)?;
    let after = bounded("after", query.after, 0, 0..=i64::MAX)?;
    Ok(AppJson(run_view(&app, &caller, RunId(id), after).await?))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// Start after this step (as `Last-Event-ID` does; the header wins).
    after: Option<i64>,
}

/// Follow a run's steps as server-sent events.
///
/// Each event's `id` is the step number, `event` its type (`run_started`,
/// `turn_started`, `model_message`, `model_routed`, `tool_call_started`, `tool_call_finished`, `note`,
/// `approval_requested`, `run_paused`, `run_finished`) and `data` the step as JSON. A
/// paused run's stream stays open and goes on when the run resumes. Steps are stored before they are sent,
/// so a client that reconnects with `Last-Event-ID` misses none, on any instance. The
/// stream ends after `run_finished`. For an agent with `stream: true`, `model_delta`
/// events (no `id`, never stored; on the instance driving the run) carry the model's
/// text as it is generated: `{"turn", "text"}`, `{"turn", "reasoning"}`, or `{"turn",
/// "restart": true}` when a retried call voids what came before.
#[utoipa::path(get, path = "/v1/runs/{id}/events", tag = "runs",
    params(("id" = Uuid, Path, description = "Run id"), EventsQuery,
           ("Last-Event-ID" = Option<i64>, Header, description = "Resume after this step")),
    responses(
        (status = 200, description = "An SSE stream of steps", content_type = "text/event-stream", body = String),
        (status = 404, description = "No such run in your tenant, or one another principal started (seeing those needs `audit:read`)", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    ))]
async fn run_events(
    State(app): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    AppPath(id): AppPath<Uuid>,
    AppQuery(query): AppQuery<EventsQuery>,
) -> Result<Response, ApiError> {
    caller.require(scopes::AGENTS_RUN)?;
    let tenant = caller.auth.tenant;
    let run = RunId(id);
    visible_run(&app, &caller, run).await?;
    let after = match headers.get("last-event-id") {
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .ok_or_else(|| ApiError::Malformed("Last-Event-ID must be a step number".into()))?,
        None => query.after.unwrap_or(0),
    };
    let ticket = app
        .streams
        .admit(&caller.auth, toolgate_core::Adapter::Rest)?;
    let streams = app.streams.clone();
    let stream = steps_stream(app, tenant, run, after);
    let response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    Ok(streams.follow(
        ticket,
        headers.get(axum::http::header::AUTHORIZATION).cloned(),
        response,
    ))
}

fn steps_stream(
    app: AppState,
    tenant: TenantId,
    run: RunId,
    after: i64,
) -> impl Stream<Item = Result<Event, Infallible>> {
    struct Cursor {
        app: AppState,
        updates: tokio::sync::watch::Receiver<toolgate_agent::runs::Committed>,
        /// The store's announcements: the run's steps committed by another instance.
        changes: toolgate_core::stores::Changes,
        deltas: tokio::sync::broadcast::Receiver<toolgate_agent::runs::Piece>,
        deltas_open: bool,
        /// Pieces received and not yet sent, with their turns: each goes out once its
        /// turn's `turn_started` step has (pieces are published at once, the steps before
        /// them may still be on their way to the store).
        held: std::collections::VecDeque<toolgate_agent::runs::Piece>,
        /// The turn of the latest `turn_started` step sent (or before `after`).
        turn: Option<u32>,
        last: i64,
        queue: std::collections::VecDeque<RunEventRecord>,
        done: bool,
    }
    let cursor = Cursor {
        updates: app.runs.subscribe(run),
        changes: toolgate_core::stores::Changes::silent(),
        deltas: app.runs.subscribe_deltas(run),
        deltas_open: true,
        held: Default::default(),
        turn: None,
        app,
        last: after,
        queue: Default::default(),
        done: false,
    };
    let piece = |data: &str| Event::default().event("model_delta").data(data);
    futures::stream::unfold(cursor, move |mut c| async move {
        if c.turn.is_none() {
            // Watching before the first read, so a step between the two is not missed.
            c.changes = c.app.store.watch_changes().await.unwrap_or_else(|err| {
                tracing::warn!(error = %err, run_id = %run, "cannot watch the store; reading the run on a timer");
                toolgate_core::stores::Changes::silent()
            });
            // Resumed after step `after`: the turn it was in (0 before the first).
            let turn = c.app.store.run_turn_at(tenant, run, after).await;
            c.turn = Some(
                turn.unwrap_or_else(|err| {
                    tracing::warn!(error = %err, run_id = %run, "reading a run's turn failed");
                    None
                })
                .unwrap_or(0),
            );
        }
        loop {
            // Pieces first into the hold, so that none goes out after the step that
            // holds its whole reply (they were published before it was stored).
            loop {
                match c.deltas.try_recv() {
                    Ok(p) => c.held.push_back(p),
                    Err(tokio::sync::broadcast::error::TryRecvError::Lagged(skipped)) => {
                        tracing::debug!(run_id = %run, skipped, "a slow run stream skipped reply pieces");
                    }
                    Err(_) => break,
                }
            }
            let turn = c.turn.unwrap_or(0);
            if c.held.front().is_some_and(|(t, _)| *t <= turn)
                && let Some((_, data)) = c.held.pop_front()
            {
                return Some((Ok(piece(&data)), c));
            }
            if let Some(e) = c.queue.pop_front() {
                c.last = e.seq;
                c.done = e.kind == "run_finished";
                if e.kind == "turn_started"
                    && let Some(t) = e.payload.get("turn").and_then(|t| t.as_u64())
                {
                    c.turn = Some(u32::try_from(t).unwrap_or(u32::MAX));
                }
                let event = Event::default()
                    .id(e.seq.to_string())
                    .event(e.kind.clone())
                    .data(step(&c.app, tenant, e).to_string());
                return Some((Ok(event), c));
            }
            if c.done {
                return None;
            }
            match c
                .app
                .store
                .run_steps(tenant, run, c.last, STEPS_PER_READ)
                .await
            {
                Ok(page) if !page.items.is_empty() => {
                    c.queue.extend(page.items);
                    continue;
                }
                Ok(_) => {}
                Err(err) => {
                    tracing::warn!(error = %err, run_id = %run, "reading run events failed");
                }
            }
            use tokio::sync::broadcast::error::RecvError;
            tokio::select! {
                _ = c.updates.changed() => {}
                () = c.changes.run(tenant, run) => {}
                piece = c.deltas.recv(), if c.deltas_open => match piece {
                    Ok(p) => c.held.push_back(p),
                    Err(RecvError::Lagged(_)) => {}
                    // Not while this stream holds a receiver; steps alone then.
                    Err(RecvError::Closed) => c.deltas_open = false,
                },
                () = tokio::time::sleep(FALLBACK) => {}
                () = c.app.shutdown.cancelled() => return None,
            }
        }
    })
}

/// Cancel a running run. It stops at its next step (a model call or tool call in flight
/// is cancelled) and ends with status `cancelled`. Another principal's run needs
/// `agents:manage` as well.
#[utoipa::path(post, path = "/v1/runs/{id}/cancel", tag = "runs",
    params(("id" = Uuid, Path, description = "Run id")),
    responses(
        (status = 202, description = "Cancellation requested", body = RunView),
        (status = 403, description = "Needs `agents:run`, and `agents:manage` for another principal's run", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such run in your tenant, or one another principal started (seeing those needs `audit:read`)", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "The run has already ended", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    ))]
async fn cancel_run(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<Uuid>,
) -> Result<Response, ApiError> {
    caller.require(scopes::AGENTS_RUN)?;
    let tenant = caller.auth.tenant;
    let run = RunId(id);
    let record = visible_run(&app, &caller, run).await?;
    if let Some(scope) = record.cancelling_needs(&caller.auth) {
        caller.require(scope)?;
    }
    if !app.runs.cancel(tenant, run).await? {
        return Err(ApiError::Conflict("the run has already ended".into()));
    }
    let view = run_view(&app, &caller, run, 0).await?;
    Ok((StatusCode::ACCEPTED, AppJson(view)).into_response())
}

//! `/v1/approvals` and `/v1/calls`: the calls waiting for a person (under the tenant's
//! policy, `/v1/policy`), their decisions, and the outcome of a call that waited.
//!
//! Listing and deciding approvals
//! needs `approvals:decide`, and nobody decides their own call unless the tenant's policy
//! allows self-approval. A call's requester may always read its approval and outcome.
//! Every decision is an audit row (adapter `approval`) beside the call's own rows.

use std::time::Duration;

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_core::approvals::DecideError;
use toolgate_core::auth::scopes;
use toolgate_core::stores::{ApprovalRecord, ApprovalStatus, ApprovalStore as _};
use toolgate_core::{Adapter, ApprovalId, CallId, ToolError};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppPath, AppQuery, before, bounded, next_cursor};
use crate::auth::Caller;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_approvals))
        .routes(routes!(approval_events))
        .routes(routes!(get_approval, decide))
        .routes(routes!(get_call))
}

/// Someone, by id and name.
#[derive(Debug, Serialize, ToSchema)]
pub struct Who {
    pub id: String,
    pub name: String,
}

/// A call held for a person's approval, and what became of it.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "id": "01936f0e-9b7a-7c11-8d2f-0a4b5c6d7e8f",
    "status": "pending",
    "tool": "execute_command",
    "risk": "high",
    "arguments": {"command": "make deploy"},
    "adapter": "agent",
    "requester": {"id": "01936f0e-0000-7c11-8d2f-0a4b5c6d7e8f", "name": "ci-bot"},
    "call_id": "01936f0e-1111-7c11-8d2f-0a4b5c6d7e8f",
    "run_id": "01936f0e-2222-7c11-8d2f-0a4b5c6d7e8f",
    "agent": "deployer",
    "created_at": "2026-11-22T10:00:00Z",
    "expires_at": "2026-11-22T11:00:00Z"
}))]
pub struct ApprovalView {
    pub id: String,
    /// `pending`, `approved`, `denied` or `expired` (= denied: nobody decided in time, or
    /// the approved call was not made in time and the approval lapsed).
    pub status: String,
    pub tool: String,
    /// `low`, `medium` or `high`.
    pub risk: String,
    /// The arguments, secret fields masked.
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// The front door the call came through: `rest`, `mcp` or `agent`.
    pub adapter: String,
    pub requester: Who,
    /// The call that asked; `GET /v1/calls/{call_id}` shows its outcome.
    pub call_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub step: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    pub created_at: DateTime<Utc>,
    /// While pending: when it expires undecided. Once approved: when it lapses unless
    /// its call is made (the tenant's `approval_ttl_secs` after the decision).
    pub expires_at: DateTime<Utc>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<Who>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<DateTime<Utc>>,
    /// Why it was approved, denied or expired.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When a call used the decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used_at: Option<DateTime<Utc>>,
}

impl From<&ApprovalRecord> for ApprovalView {
    fn from(r: &ApprovalRecord) -> Self {
        Self {
            id: r.id.to_string(),
            status: r.effective_status(Utc::now()).as_str().to_owned(),
            tool: r.tool.clone(),
            risk: r.risk.as_str().to_owned(),
            arguments: r.arguments.clone(),
            adapter: r.adapter.as_str().to_owned(),
            requester: Who {
                id: r.requester.to_string(),
                name: r.requester_name.clone(),
            },
            call_id: r.call_id.to_string(),
            run_id: r.run_id.map(|id| id.to_string()),
            step: r.step,
            agent: r.agent.clone(),
            created_at: r.created_at,
            expires_at: r.expires_at,
            decided_by: r.decided_by.map(|id| Who {
                id: id.to_string(),
                name: r.decided_by_name.clone().unwrap_or_default(),
            }),
            decided_at: r.decided_at,
            reason: r.reason.clone(),
            used_at: r.used_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalList {
    /// Newest first.
    pub approvals: Vec<ApprovalView>,
    /// More approvals match than these: the list stopped at `limit`, or once its
    /// approvals held about 4 MiB of arguments and results.
    pub more: bool,
    /// Pass as `cursor` (with the same `status`) for the next page; absent on the last.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ApprovalQuery {
    /// `pending` (the default), `approved`, `denied`, `expired` or `all`.
    #[param(example = "pending")]
    pub status: Option<String>,
    /// Opaque cursor from a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Most approvals returned, newest first (1–500, default 100).
    #[param(minimum = 1, maximum = 500)]
    pub limit: Option<i64>,
}

/// The tenant's approvals, newest first: by default those waiting for a decision.
#[utoipa::path(
    get,
    path = "/v1/approvals",
    tag = "approvals",
    params(ApprovalQuery),
    responses(
        (status = 200, description = "Approvals", body = ApprovalList),
        (status = 400, description = "Unknown status, bad cursor or bad limit", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks approvals:decide", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn list_approvals(
    State(app): State<AppState>,
    caller: Caller,
    AppQuery(query): AppQuery<ApprovalQuery>,
) -> Result<AppJson<ApprovalList>, ApiError> {
    caller.require(scopes::APPROVALS_DECIDE)?;
    let status = match query.status.as_deref().unwrap_or("pending") {
        "all" => None,
        s @ ("pending" | "approved" | "denied" | "expired") => Some(s),
        other => {
            return Err(ApiError::Malformed(format!(
                "status {other:?} is not one of pending, approved, denied, expired, all"
            )));
        }
    };
    let before = before(query.cursor.as_deref())?;
    let limit = bounded("limit", query.limit, 100, 1..=500)?;
    let page = app
        .store
        .list_approvals(caller.auth.tenant, status, before, limit)
        .await?;
    let next_cursor = page.next().map(next_cursor);
    Ok(AppJson(ApprovalList {
        approvals: page.items.iter().map(ApprovalView::from).collect(),
        more: page.more,
        next_cursor,
    }))
}

/// Longest the approvals stream goes without looking at the store: it looks when the
/// store announces a change to the tenant's approvals (made on any instance) and when a
/// pending one expires, and this bounds the cost of an announcement missed.
const EVENTS_FALLBACK: Duration = Duration::from_secs(5);
/// Approvals the stream compares per look: the newest.
const EVENTS_WINDOW: i64 = 200;

/// Follow the tenant's approvals as server-sent events: `approval_requested` when a call
/// is held, `approval_decided` when someone approves or denies it, `approval_expired`
/// when nobody did in time. Each `data` is the approval as JSON; `id` is
/// `<approval id>:<status>`. For approval inboxes; needs `approvals:decide`.
#[utoipa::path(
    get,
    path = "/v1/approvals/events",
    tag = "approvals",
    responses(
        (status = 200, description = "An SSE stream of approval events", content_type = "text/event-stream", body = String),
        (status = 403, description = "The caller lacks approvals:decide", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn approval_events(
    State(app): State<AppState>,
    caller: Caller,
    headers: axum::http::HeaderMap,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    use axum::response::sse::{KeepAlive, Sse};
    caller.require(scopes::APPROVALS_DECIDE)?;
    let ticket = app
        .streams
        .admit(&caller.auth, toolgate_core::Adapter::Rest)?;
    let streams = app.streams.clone();
    let tenant = caller.auth.tenant;
    // Watching before the first read, so a change between the two is not missed.
    let changes = app.store.watch_changes().await?;
    // Their states only: an approval's arguments and result are read when it changes.
    let known = app.store.approval_states(tenant, EVENTS_WINDOW).await?;
    let now = Utc::now();
    let seen: std::collections::HashMap<ApprovalId, ApprovalStatus> = known
        .iter()
        .map(|r| (r.id, r.effective_status(now)))
        .collect();
    struct Watch {
        app: AppState,
        changes: toolgate_core::stores::Changes,
        seen: std::collections::HashMap<ApprovalId, ApprovalStatus>,
        /// When the first approval still pending expires.
        next_expiry: Option<chrono::DateTime<Utc>>,
        queue: std::collections::VecDeque<axum::response::sse::Event>,
    }
    let watch = Watch {
        changes,
        next_expiry: next_expiry(&known, now),
        app,
        seen,
        queue: Default::default(),
    };
    let stream = futures::stream::unfold(watch, move |mut w| async move {
        loop {
            if let Some(event) = w.queue.pop_front() {
                return Some((Ok::<_, std::convert::Infallible>(event), w));
            }
            let look = w
                .next_expiry
                .map(|at| (at - Utc::now()).to_std().unwrap_or_default())
                .map_or(EVENTS_FALLBACK, |expiry| expiry.min(EVENTS_FALLBACK));
            tokio::select! {
                () = w.changes.approvals_of(tenant) => {}
                () = tokio::time::sleep(look) => {}
                () = w.app.shutdown.cancelled() => return None,
            }
            let states = match w.app.store.approval_states(tenant, EVENTS_WINDOW).await {
                Ok(states) => states,
                Err(err) => {
                    tracing::warn!(error = %err, "reading approvals for a stream failed");
                    continue;
                }
            };
            let now = Utc::now();
            w.next_expiry = next_expiry(&states, now);
            // Oldest first, so events come in the order things happened.
            for state in states.iter().rev() {
                let status = state.effective_status(now);
                if w.seen.get(&state.id) == Some(&status) {
                    continue;
                }
                let record = match w.app.store.get_approval(tenant, state.id).await {
                    Ok(Some(record)) => record,
                    Ok(None) => continue,
                    Err(err) => {
                        // Not marked seen: the next look tries again.
                        tracing::warn!(error = %err, "reading an approval for a stream failed");
                        continue;
                    }
                };
                w.seen.insert(state.id, status);
                let kind = match status {
                    ApprovalStatus::Pending => "approval_requested",
                    ApprovalStatus::Expired => "approval_expired",
                    ApprovalStatus::Approved | ApprovalStatus::Denied => "approval_decided",
                };
                let data = serde_json::to_string(&ApprovalView::from(&record)).unwrap_or_default();
                w.queue.push_back(
                    axum::response::sse::Event::default()
                        .id(format!("{}:{status}", record.id))
                        .event(kind)
                        .data(data),
                );
            }
        }
    });
    let response = Sse::new(stream)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response();
    Ok(streams.follow(
        ticket,
        headers.get(axum::http::header::AUTHORIZATION).cloned(),
        response,
    ))
}

/// When the first of `states` still pending at `now` expires.
fn next_expiry(
    states: &[toolgate_store::ApprovalState],
    now: chrono::DateTime<Utc>,
) -> Option<chrono::DateTime<Utc>> {
    states
        .iter()
        .filter(|r| r.effective_status(now) == ApprovalStatus::Pending)
        .map(|r| r.expires_at)
        .min()
}

/// One approval, to whoever may decide it or asked for it.
#[utoipa::path(
    get,
    path = "/v1/approvals/{id}",
    tag = "approvals",
    params(("id" = String, Path, description = "Approval id")),
    responses(
        (status = 200, description = "The approval", body = ApprovalView),
        (status = 400, description = "Malformed id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such approval in the caller's tenant (or not theirs to see)", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn get_approval(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<uuid::Uuid>,
) -> Result<AppJson<ApprovalView>, ApiError> {
    let record = visible_approval(&app, &caller, ApprovalId(id)).await?;
    Ok(AppJson(ApprovalView::from(&record)))
}

async fn visible_approval(
    app: &AppState,
    caller: &Caller,
    id: ApprovalId,
) -> Result<ApprovalRecord, ApiError> {
    app.store
        .get_approval(caller.auth.tenant, id)
        .await?
        .filter(|r| r.is_visible_to(&caller.auth))
        .ok_or_else(|| ToolError::not_found(format!("no approval {id} in your tenant")).into())
}

/// A decision.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"decision": "deny", "reason": "not during the freeze"}))]
pub struct DecideRequest {
    /// `approve` or `deny`.
    #[schema(example = "approve")]
    pub decision: DecisionKind,
    /// Why; shown to the requester (and, for agent runs, to the model).
    #[serde(default)]
    #[schema(max_length = 2000)]
    pub reason: String,
}

#[derive(Debug, Clone, Copy, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DecisionKind {
    Approve,
    Deny,
}

/// Approve or deny a pending call.
///
/// Needs `approvals:decide`; the principal who made the call may not decide it unless
/// the tenant's policy allows self-approval. An agent run waiting on it resumes (on this
/// instance); an approved REST call runs now, its outcome at `GET /v1/calls/{call_id}`;
/// an MCP client makes the call again.
#[utoipa::path(
    post,
    path = "/v1/approvals/{id}",
    tag = "approvals",
    params(("id" = String, Path, description = "Approval id")),
    request_body(content = DecideRequest, content_type = "application/json"),
    responses(
        (status = 200, description = "Decided", body = ApprovalView),
        (status = 400, description = "Malformed body or id", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks approvals:decide, or asked for this call itself", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such approval in the caller's tenant", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already decided, or expired", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than the configured limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body not sent as application/json", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
    )
)]
async fn decide(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<uuid::Uuid>,
    AppJson(body): AppJson<DecideRequest>,
) -> Result<AppJson<ApprovalView>, ApiError> {
    caller.require(scopes::APPROVALS_DECIDE)?;
    let approve = matches!(body.decision, DecisionKind::Approve);
    let decided = app
        .decisions
        .decide(
            &caller.auth,
            ApprovalId(id),
            approve,
            body.reason,
            Some(&caller.request_id),
        )
        .await
        .map_err(|e| match e {
            DecideError::Refused(e) => ApiError::Tool(e),
            DecideError::Store(e) => e.into(),
            DecideError::Audit(e) => ApiError::Internal(anyhow::anyhow!(e)),
        })?;
    Ok(AppJson(ApprovalView::from(&decided)))
}

/// A call and where it stands, for calls that waited for approval.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({
    "call_id": "01936f0e-1111-7c11-8d2f-0a4b5c6d7e8f",
    "status": "completed",
    "approval": {"id": "01936f0e-9b7a-7c11-8d2f-0a4b5c6d7e8f", "status": "approved"},
    "result": {"status": 200, "body": {"call_id": "01936f0e-3333-7c11-8d2f-0a4b5c6d7e8f", "content": [{"type": "text", "text": "done\n[exit code 0]"}], "duration_ms": 12.5, "truncated": false}}
}))]
pub struct CallView {
    pub call_id: String,
    /// `awaiting_approval`, `running` (approved, not finished), `completed` (see
    /// `result`), `denied` or `expired`; for calls through MCP or an agent, `approved`
    /// once decided (the client or the run makes the call).
    pub status: String,
    pub approval: ApprovalView,
    /// The outcome of the call made after approval: the HTTP status and body the
    /// invoke request would have answered with.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub result: Option<Value>,
}

impl CallView {
    pub fn new(record: &ApprovalRecord) -> Self {
        let approval = ApprovalView::from(record);
        let status = match (record.effective_status(Utc::now()), &record.result) {
            (ApprovalStatus::Pending, _) => "awaiting_approval",
            (ApprovalStatus::Approved, Some(_)) => "completed",
            (ApprovalStatus::Approved, None) if record.adapter == Adapter::Rest => "running",
            (other, _) => other.as_str(),
        }
        .to_owned();
        Self {
            call_id: record.call_id.to_string(),
            status,
            approval,
            result: record.result.clone(),
        }
    }
}

/// A call that waited for approval: its approval and, once made, its outcome.
#[utoipa::path(
    get,
    path = "/v1/calls/{call_id}",
    tag = "approvals",
    params(("call_id" = String, Path, description = "The call id from the 202 response")),
    responses(
        (status = 200, description = "The call", body = CallView),
        (status = 400, description = "Malformed id", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No call with this id waited for approval in the caller's tenant (or it is not theirs to see)", body = Problem, content_type = "application/problem+json"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn get_call(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(call_id): AppPath<uuid::Uuid>,
) -> Result<AppJson<CallView>, ApiError> {
    let record = app
        .store
        .approval_for_call(caller.auth.tenant, CallId(call_id))
        .await?
        .filter(|r| r.is_visible_to(&caller.auth))
        .ok_or_else(|| {
            ToolError::not_found(format!(
                "no call {call_id} waited for approval in your tenant"
            ))
        })?;
    Ok(AppJson(CallView::new(&record)))
}

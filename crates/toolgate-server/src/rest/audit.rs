//! `GET /v1/audit`: the caller's tenant's audit log, newest first, filtered and paged.

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use toolgate_core::auth::scopes;
use toolgate_core::{PrincipalId, RunId};
use toolgate_store::{AuditFilter, AuditRow};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppQuery};
use crate::auth::Caller;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_audit))
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only calls of this tool.
    tool: Option<String>,
    /// Only calls by this principal.
    principal: Option<Uuid>,
    /// `rest`, `mcp`, `agent`, or `approval` (people's decisions on approvals).
    adapter: Option<String>,
    /// `ok` or an error category (`invalid_arguments`, `forbidden`, `timeout`, …).
    outcome: Option<String>,
    /// Only calls of this agent run.
    run_id: Option<Uuid>,
    /// Calls started at or after this time (RFC 3339).
    since: Option<DateTime<Utc>>,
    /// Calls started before this time (RFC 3339).
    until: Option<DateTime<Utc>>,
    /// Opaque cursor from a previous page's `next_cursor`.
    cursor: Option<String>,
    /// Page size, 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    limit: Option<i64>,
}

/// One recorded call.
#[derive(Debug, Serialize, ToSchema)]
pub struct AuditEntry {
    pub call_id: Uuid,
    /// Position in the tenant's hash chain, from 1.
    pub seq: i64,
    pub principal_id: Uuid,
    pub adapter: String,
    pub tool: String,
    /// Arguments, secret fields masked as `***`.
    #[schema(value_type = Object)]
    pub arguments: serde_json::Value,
    /// SHA-256 of the unmasked arguments.
    pub arguments_hash: String,
    /// `ok` or the error category.
    pub outcome: String,
    pub error: Option<String>,
    pub duration_ms: f64,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
    pub run_id: Option<Uuid>,
    pub step: Option<i32>,
    pub client: Option<String>,
    /// The approval the call asked for, used, or was refused by; for rows of adapter
    /// `approval` (a person's decision), the approval decided.
    pub approval_id: Option<Uuid>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub prev_hash: String,
    pub row_hash: String,
}

impl From<AuditRow> for AuditEntry {
    fn from(r: AuditRow) -> Self {
        Self {
            call_id: r.call_id,
            seq: r.seq,
            principal_id: r.principal.0,
            adapter: r.adapter,
            tool: r.tool,
            arguments: serde_json::from_str(&r.arguments).unwrap_or(serde_json::Value::Null),
            arguments_hash: r.arguments_hash,
            outcome: r.outcome,
            error: r.error,
            duration_ms: r.duration_us as f64 / 1000.0,
            request_id: r.request_id,
            trace_id: r.trace_id,
            run_id: r.run_id.map(|r| r.0),
            step: r.step,
            client: r.client,
            approval_id: r.approval_id,
            started_at: r.started_at,
            finished_at: r.finished_at,
            prev_hash: r.prev_hash,
            row_hash: r.row_hash,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct AuditPage {
    pub entries: Vec<AuditEntry>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// The caller's tenant's audit log, newest first (needs `audit:read`).
#[utoipa::path(
    get,
    path = "/v1/audit",
    tag = "audit",
    params(AuditQuery),
    responses(
        (status = 200, body = AuditPage, description = "A page of audit entries, newest first"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "Bad filter"),
        (status = 401, body = Problem, content_type = "application/problem+json", description = "No valid credentials"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks audit:read"),
    )
)]
async fn list_audit(
    State(app): State<AppState>,
    caller: Caller,
    AppQuery(q): AppQuery<AuditQuery>,
) -> Result<AppJson<AuditPage>, ApiError> {
    caller.require(scopes::AUDIT_READ)?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::Malformed(
            "limit must be between 1 and 1000".into(),
        ));
    }
    let before_seq = q
        .cursor
        .as_deref()
        .map(|c| {
            c.parse::<i64>()
                .map_err(|_| ApiError::Malformed("invalid cursor".into()))
        })
        .transpose()?;
    let filter = AuditFilter {
        tool: q.tool,
        principal: q.principal.map(PrincipalId),
        adapter: q.adapter,
        outcome: q.outcome,
        run_id: q.run_id.map(RunId),
        since: q.since,
        until: q.until,
        before_seq,
    };
    let rows = app
        .store
        .list_audit(caller.auth.tenant, &filter, limit + 1)
        .await?;
    let more = rows.len() as i64 > limit;
    let mut entries: Vec<AuditEntry> = rows.into_iter().map(Into::into).collect();
    entries.truncate(usize::try_from(limit).unwrap_or(usize::MAX));
    let next_cursor = more
        .then(|| entries.last().map(|e| e.seq.to_string()))
        .flatten();
    Ok(AppJson(AuditPage {
        entries,
        next_cursor,
    }))
}

//! `/v1/policy`, `/v1/approvals` and `/v1/calls`: a tenant's approval policy, the calls
//! waiting for a person, their decisions, and the outcome of a call that waited.
//!
//! Reading and setting the policy needs `tenant:admin`; listing and deciding approvals
//! needs `approvals:decide`, and nobody decides their own call unless the tenant's policy
//! allows self-approval. A call's requester may always read its approval and outcome.
//! Every decision is an audit row (adapter `approval`) beside the call's own rows.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toolgate_core::auth::scopes;
use toolgate_core::limits::RateLimits;
use toolgate_core::policy::Rule;
use toolgate_core::stores::{ApprovalRecord, ApprovalStore as _};
use toolgate_core::{Action, Adapter, ApprovalId, CallId, Policy, Risk, ToolError, Violation};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppPath, AppQuery};
use crate::auth::Caller;
use crate::request_id::RequestId;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_policy, put_policy))
        .routes(routes!(list_approvals))
        .routes(routes!(approval_events))
        .routes(routes!(get_approval, decide))
        .routes(routes!(get_call))
}

/// A tenant's approval policy.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({
    "level": 5,
    "self_approval": false,
    "approval_ttl_secs": 3600,
    "rules": [{"tool": "read_file", "action": "allow"}, {"agent": "nightly", "tool": "execute_command", "action": "deny"}],
    "risk_scopes": {"high": "tools:high_risk"},
    "rate_limits": {"tenant_per_minute": 600, "principal_per_minute": 120, "tools": {"web_fetch": 30}, "tenant_concurrency": 16}
}))]
pub struct PolicyBody {
    /// Ratification level 0–10: 0 asks nobody; 1–3 holds high-risk calls for approval;
    /// 4–7 high- and medium-risk calls; 8–10 every call.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 10)]
    pub level: u8,
    /// Whether the principal who made a call may approve it.
    #[serde(default)]
    pub self_approval: bool,
    /// How long an approval waits before it counts as denied, in seconds.
    #[serde(default = "default_ttl")]
    #[schema(minimum = 1, maximum = 604800)]
    pub approval_ttl_secs: u64,
    /// Overrides of the level for a tool, an agent, or a tool called by an agent. The
    /// most specific matching rule wins, then the strictest.
    #[serde(default)]
    pub rules: Vec<RuleBody>,
    /// Scopes a caller needs, beyond the fixed ones, for tools of a risk
    /// (`low`, `medium`, `high`).
    #[serde(default)]
    pub risk_scopes: BTreeMap<String, String>,
    /// The tenant's own rate and concurrency limits. They only tighten the operator's
    /// (`[limits]`): the stricter of the two applies.
    #[serde(default)]
    pub rate_limits: RateLimitsBody,
    /// Tools whose results are cached for the tenant, by name, with how long a result is
    /// kept in seconds (at most the operator's `cache.max_ttl_secs`; `0` turns off an
    /// operator default). Only read-only, idempotent tools are ever cached; a cache hit
    /// still passes validation, authorization and this policy, and is audited
    /// (`cache: hit`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub cache: BTreeMap<String, u64>,
    /// What a changed definition of a tool from the tenant's own upstreams does (its
    /// name, description, schemas or annotations differ from the pinned one), and a
    /// description that reads as instructions to the model: `quarantine` (default: the
    /// tool is withheld until a tenant admin approves the new definition at
    /// `/v1/tool-definitions`), `warn` (taken, and recorded), `off`.
    #[serde(default)]
    #[schema(value_type = String, example = "quarantine")]
    pub pin: toolgate_core::policy::PinMode,
}

/// Limits on the tenant's calls; an absent limit is none (beyond the operator's). A call
/// over one is refused with 429 and `Retry-After`, before it runs and without an audit row.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitsBody {
    /// Calls per minute by the whole tenant (up to this many at once, then one every
    /// 60/n seconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub tenant_per_minute: Option<u32>,
    /// Calls per minute by each principal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub principal_per_minute: Option<u32>,
    /// Calls per minute of a tool by the whole tenant, by tool name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub tools: BTreeMap<String, u32>,
    /// Calls in flight at once for the whole tenant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1)]
    pub tenant_concurrency: Option<u32>,
}

impl From<&RateLimits> for RateLimitsBody {
    fn from(l: &RateLimits) -> Self {
        Self {
            tenant_per_minute: l.tenant_per_minute,
            principal_per_minute: l.principal_per_minute,
            tools: l.tools.clone(),
            tenant_concurrency: l.tenant_concurrency,
        }
    }
}

impl From<RateLimitsBody> for RateLimits {
    fn from(l: RateLimitsBody) -> Self {
        Self {
            tenant_per_minute: l.tenant_per_minute,
            principal_per_minute: l.principal_per_minute,
            tools: l.tools,
            tenant_concurrency: l.tenant_concurrency,
        }
    }
}

fn default_ttl() -> u64 {
    Policy::default().approval_ttl_secs
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RuleBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// `allow`, `require` (approval) or `deny`.
    #[schema(value_type = String, example = "require")]
    pub action: Action,
}

impl From<&Policy> for PolicyBody {
    fn from(p: &Policy) -> Self {
        Self {
            level: p.level,
            self_approval: p.self_approval,
            approval_ttl_secs: p.approval_ttl_secs,
            rules: p
                .rules
                .iter()
                .map(|r| RuleBody {
                    tool: r.tool.clone(),
                    agent: r.agent.clone(),
                    action: r.action,
                })
                .collect(),
            risk_scopes: p
                .risk_scopes
                .iter()
                .map(|(risk, scope)| (risk_name(*risk).to_owned(), scope.clone()))
                .collect(),
            rate_limits: RateLimitsBody::from(&p.rate_limits),
            cache: p.cache.clone(),
            pin: p.pin,
        }
    }
}

fn risk_name(risk: Risk) -> &'static str {
    match risk {
        Risk::Low => "low",
        Risk::Medium => "medium",
        Risk::High => "high",
    }
}

impl PolicyBody {
    fn into_policy(self) -> Result<Policy, ToolError> {
        let mut violations = Vec::new();
        let mut risk_scopes = BTreeMap::new();
        for (risk, scope) in self.risk_scopes {
            let parsed = match risk.as_str() {
                "low" => Risk::Low,
                "medium" => Risk::Medium,
                "high" => Risk::High,
                _ => {
                    violations.push(Violation {
                        pointer: format!("/risk_scopes/{risk}"),
                        message: "a risk is low, medium or high".into(),
                    });
                    continue;
                }
            };
            risk_scopes.insert(parsed, scope);
        }
        let policy = Policy {
            level: self.level,
            self_approval: self.self_approval,
            approval_ttl_secs: self.approval_ttl_secs,
            rules: self
                .rules
                .into_iter()
                .map(|r| Rule {
                    tool: r.tool,
                    agent: r.agent,
                    action: r.action,
                })
                .collect(),
            risk_scopes,
            rate_limits: self.rate_limits.into(),
            cache: self.cache,
            pin: self.pin,
        };
        violations.extend(
            policy
                .problems()
                .into_iter()
                .map(|(field, message)| Violation {
                    pointer: format!("/{}", field.replace('[', "/").replace(']', "")),
                    message,
                }),
        );
        if violations.is_empty() {
            Ok(policy)
        } else {
            Err(ToolError::invalid_arguments(format!(
                "the policy is invalid: {} problems",
                violations.len()
            ))
            .with_violations(violations))
        }
    }
}

/// The tenant's approval policy (the default, level 0, until one is set).
#[utoipa::path(
    get,
    path = "/v1/policy",
    tag = "approvals",
    responses(
        (status = 200, description = "The policy", body = PolicyBody),
        (status = 401, description = "Missing or invalid credentials", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks tenant:admin", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Internal error", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn get_policy(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<AppJson<PolicyBody>, ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    let policy = current_policy(&app, &caller).await?;
    Ok(AppJson(PolicyBody::from(&*policy)))
}

async fn current_policy(app: &AppState, caller: &Caller) -> Result<Arc<Policy>, ApiError> {
    use toolgate_core::Approvals;
    app.approvals
        .policy(caller.auth.tenant)
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!(e)))
}

/// Replace the tenant's approval policy. It applies to new calls at once on this
/// instance, within a second on others.
#[utoipa::path(
    put,
    path = "/v1/policy",
    tag = "approvals",
    request_body(content = PolicyBody, content_type = "application/json"),
    responses(
        (status = 200, description = "The policy now in force", body = PolicyBody),
        (status = 400, description = "Malformed body or an invalid policy (each problem listed)", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or invalid credentials", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks tenant:admin", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than the configured limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body not sent as application/json", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Internal error", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn put_policy(
    State(app): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<PolicyBody>,
) -> Result<AppJson<PolicyBody>, ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    let policy = body.into_policy()?;
    let doc = serde_json::to_value(&policy).map_err(|e| ApiError::Internal(e.into()))?;
    app.store
        .put_approval_policy(caller.auth.tenant, &doc)
        .await?;
    app.approvals.forget(caller.auth.tenant);
    app.executor
        .events()
        .emit(&toolgate_core::Event::PolicyChanged {
            tenant: caller.auth.tenant,
            level: policy.level,
        });
    Ok(AppJson(PolicyBody::from(&policy)))
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
    /// `pending`, `approved`, `denied` or `expired` (= denied: nobody decided in time).
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
            status: r.effective_status(Utc::now()).to_owned(),
            tool: r.tool.clone(),
            risk: r.risk.clone(),
            arguments: r.arguments.clone(),
            adapter: r.adapter.clone(),
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
    pub approvals: Vec<ApprovalView>,
}

#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ApprovalQuery {
    /// `pending` (the default), `approved`, `denied`, `expired` or `all`.
    #[param(example = "pending")]
    pub status: Option<String>,
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
        (status = 400, description = "Unknown status or bad limit", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or invalid credentials", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks approvals:decide", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Internal error", body = Problem, content_type = "application/problem+json"),
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
    let limit = query.limit.unwrap_or(100);
    if !(1..=500).contains(&limit) {
        return Err(ApiError::Malformed(
            "limit must be between 1 and 500".into(),
        ));
    }
    let records = app
        .store
        .list_approvals(caller.auth.tenant, status, limit)
        .await?;
    Ok(AppJson(ApprovalList {
        approvals: records.iter().map(ApprovalView::from).collect(),
    }))
}

/// How often the approvals stream looks at the store (decisions land on any instance).
const EVENTS_POLL: Duration = Duration::from_secs(1);
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
        (status = 401, description = "Missing or invalid credentials", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks approvals:decide", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Internal error", body = Problem, content_type = "application/problem+json"),
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
    let ticket = app.streams.admit(&caller.auth)?;
    let streams = app.streams.clone();
    let tenant = caller.auth.tenant;
    let known = app
        .store
        .list_approvals(tenant, None, EVENTS_WINDOW)
        .await?;
    let now = Utc::now();
    let seen: std::collections::HashMap<ApprovalId, String> = known
        .iter()
        .map(|r| (r.id, r.effective_status(now).to_owned()))
        .collect();
    struct Watch {
        app: AppState,
        seen: std::collections::HashMap<ApprovalId, String>,
        queue: std::collections::VecDeque<axum::response::sse::Event>,
    }
    let watch = Watch {
        app,
        seen,
        queue: Default::default(),
    };
    let stream = futures::stream::unfold(watch, move |mut w| async move {
        loop {
            if let Some(event) = w.queue.pop_front() {
                return Some((Ok::<_, std::convert::Infallible>(event), w));
            }
            tokio::select! {
                () = tokio::time::sleep(EVENTS_POLL) => {}
                () = w.app.shutdown.cancelled() => return None,
            }
            let records = match w
                .app
                .store
                .list_approvals(tenant, None, EVENTS_WINDOW)
                .await
            {
                Ok(records) => records,
                Err(err) => {
                    tracing::warn!(error = %err, "reading approvals for a stream failed");
                    continue;
                }
            };
            let now = Utc::now();
            // Oldest first, so events come in the order things happened.
            for record in records.iter().rev() {
                let status = record.effective_status(now);
                if w.seen.get(&record.id).map(String::as_str) == Some(status) {
                    continue;
                }
                w.seen.insert(record.id, status.to_owned());
                let kind = match status {
                    "pending" => "approval_requested",
                    "expired" => "approval_expired",
                    _ => "approval_decided",
                };
                let data = serde_json::to_string(&ApprovalView::from(record)).unwrap_or_default();
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

/// One approval, to whoever may decide it or asked for it.
#[utoipa::path(
    get,
    path = "/v1/approvals/{id}",
    tag = "approvals",
    params(("id" = String, Path, description = "Approval id")),
    responses(
        (status = 200, description = "The approval", body = ApprovalView),
        (status = 400, description = "Malformed id", body = Problem, content_type = "application/problem+json"),
        (status = 401, description = "Missing or invalid credentials", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such approval in the caller's tenant (or not theirs to see)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Internal error", body = Problem, content_type = "application/problem+json"),
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

fn may_read(caller: &Caller, record: &ApprovalRecord) -> bool {
    record.requester == caller.auth.principal.id
        || caller.auth.has_scope(scopes::APPROVALS_DECIDE)
        || caller.auth.has_scope(scopes::AUDIT_READ)
}

async fn visible_approval(
    app: &AppState,
    caller: &Caller,
    id: ApprovalId,
) -> Result<ApprovalRecord, ApiError> {
    app.store
        .get_approval(caller.auth.tenant, id)
        .await?
        .filter(|r| may_read(caller, r))
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
        (status = 401, description = "Missing or invalid credentials", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The caller lacks approvals:decide, or asked for this call itself", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No such approval in the caller's tenant", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "Already decided, or expired", body = Problem, content_type = "application/problem+json"),
        (status = 413, description = "Body larger than the configured limit", body = Problem, content_type = "application/problem+json"),
        (status = 415, description = "Body not sent as application/json", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Internal error", body = Problem, content_type = "application/problem+json"),
    )
)]
async fn decide(
    State(app): State<AppState>,
    caller: Caller,
    axum::Extension(RequestId(request_id)): axum::Extension<RequestId>,
    AppPath(id): AppPath<uuid::Uuid>,
    AppJson(body): AppJson<DecideRequest>,
) -> Result<AppJson<ApprovalView>, ApiError> {
    caller.require(scopes::APPROVALS_DECIDE)?;
    let approve = matches!(body.decision, DecisionKind::Approve);
    let decided = crate::approvals::decide(
        &app,
        &caller.auth,
        ApprovalId(id),
        approve,
        body.reason,
        Some(&request_id),
    )
    .await?;
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
        let status = match (approval.status.as_str(), &record.result) {
            ("pending", _) => "awaiting_approval",
            ("approved", Some(_)) => "completed",
            ("approved", None) if record.adapter == Adapter::Rest.as_str() => "running",
            (other, _) => other,
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
        (status = 401, description = "Missing or invalid credentials", body = Problem, content_type = "application/problem+json"),
        (status = 404, description = "No call with this id waited for approval in the caller's tenant (or it is not theirs to see)", body = Problem, content_type = "application/problem+json"),
        (status = 500, description = "Internal error", body = Problem, content_type = "application/problem+json"),
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
        .filter(|r| may_read(&caller, r))
        .ok_or_else(|| {
            ToolError::not_found(format!(
                "no call {call_id} waited for approval in your tenant"
            ))
        })?;
    Ok(AppJson(CallView::new(&record)))
}

//! Approvals in the gateway: the executor's [`Approvals`] seam over the store (with a
//! short policy cache), and what a person's decision sets going.
//!
//! A decision may land on any instance. An agent run waiting on it is taken over by the
//! instance that received the decision (or, failing that, by the next periodic claim of
//! any instance). A REST call approved is run by the deciding instance, as its
//! requester, and its outcome stored for `GET /v1/calls/{call_id}`. An MCP client makes
//! the call again, which uses the approval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_core::audit::AuditRecord;
use toolgate_core::policy::{ApprovalError, ApprovalRequest};
use toolgate_core::{
    Adapter, ApprovalId, Approvals, AuthContext, CallContext, ErrorKind, Gate, Outcome, Policy,
    TenantId, ToolError, Toolset,
};
use toolgate_store::Store;
use toolgate_store::approvals::ApprovalRecord;

use crate::rest::error::ApiError;
use crate::rest::tools::InvokeResponse;
use crate::state::AppState;

/// How long a tenant's policy is served from memory: a change made on another instance
/// applies within this time (at once on the instance that made it).
const POLICY_TTL: Duration = Duration::from_secs(1);

pub struct StoreApprovals {
    store: Store,
    cache: Mutex<HashMap<TenantId, (Instant, Arc<Policy>)>>,
}

impl StoreApprovals {
    pub fn new(store: Store) -> Self {
        Self {
            store,
            cache: Mutex::default(),
        }
    }

    /// Drops the cached policy of `tenant` (after it changed here).
    pub fn forget(&self, tenant: TenantId) {
        self.lock().remove(&tenant);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TenantId, (Instant, Arc<Policy>)>> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The tenant's policy from the store, cached for [`POLICY_TTL`].
    async fn load_policy(&self, tenant: TenantId) -> Result<Arc<Policy>, ApprovalError> {
        let stored = self
            .store
            .approval_policy(tenant)
            .await
            .map_err(|e| ApprovalError(e.to_string()))?;
        let policy = match stored {
            Some(doc) => serde_json::from_value(doc)
                .map_err(|e| ApprovalError(format!("the stored policy cannot be read: {e}")))?,
            None => Policy::default(),
        };
        let policy = Arc::new(policy);
        self.lock().insert(tenant, (Instant::now(), policy.clone()));
        Ok(policy)
    }
}

#[async_trait]
impl Approvals for StoreApprovals {
    async fn policy(&self, tenant: TenantId) -> Result<Arc<Policy>, ApprovalError> {
        if let Some((at, policy)) = self.lock().get(&tenant)
            && at.elapsed() < POLICY_TTL
        {
            return Ok(policy.clone());
        }
        // Boxed apart: the store read's future is kilobytes, and every call's (cached)
        // policy lookup would otherwise allocate and copy it.
        Box::pin(self.load_policy(tenant)).await
    }

    async fn gate(&self, request: ApprovalRequest) -> Result<Gate, ApprovalError> {
        // The executor announces what it found (`approval.used`, …).
        self.store
            .gate_approval(&request)
            .await
            .map_err(|e| ApprovalError(e.to_string()))
    }
}

/// A decision as an audit row of adapter `approval`: the decider, the tool and masked
/// arguments decided on, the outcome (`ok` approved, `denied`), the reason.
pub async fn record_decision(
    app: &AppState,
    decider: &Arc<AuthContext>,
    request_id: Option<&str>,
    decided: &ApprovalRecord,
) -> Result<(), toolgate_core::audit::AuditError> {
    let mut ctx = CallContext::new(decider.clone(), Adapter::Approval);
    ctx.request_id = request_id.map(str::to_owned);
    let mut record = AuditRecord::start(
        &ctx,
        &decided.tool,
        &decided.arguments,
        decided.arguments.clone(),
    );
    record.arguments_hash = decided.arguments_hash.clone();
    record.approval = Some(decided.id);
    let (outcome, note) = if decided.status == "approved" {
        (Outcome::Ok, None)
    } else {
        (Outcome::Error(ErrorKind::Denied), decided.reason.clone())
    };
    app.audit
        .record(record.finish(outcome, note, Duration::ZERO))
        .await
}

/// Longest reason a decision may give, in characters.
pub const MAX_REASON_CHARS: usize = 2000;

/// A person decides approval `id`, through any front door (REST, an MCP client's
/// elicitation): the one place the rules of deciding live. The decider needs
/// `approvals:decide`; nobody decides their own call unless the tenant's policy allows
/// self-approval; a reason is at most [`MAX_REASON_CHARS`], and a denial without one
/// says so. The decision is stored (once: a decided approval is a conflict), audited
/// as a row of adapter `approval`, announced as the `approval.decided` event, and what
/// it allows is set going ([`after_decision`]).
pub async fn decide(
    app: &AppState,
    decider: &Arc<AuthContext>,
    id: ApprovalId,
    approve: bool,
    reason: String,
    request_id: Option<&str>,
) -> Result<ApprovalRecord, ApiError> {
    if !decider.has_scope(toolgate_core::auth::scopes::APPROVALS_DECIDE) {
        return Err(
            ToolError::forbidden("deciding approvals needs the approvals:decide scope").into(),
        );
    }
    if reason.chars().count() > MAX_REASON_CHARS {
        return Err(ToolError::invalid_arguments(format!(
            "the reason is longer than {MAX_REASON_CHARS} characters"
        ))
        .with_violations(vec![toolgate_core::Violation {
            pointer: "/reason".into(),
            message: format!("at most {MAX_REASON_CHARS} characters"),
        }])
        .into());
    }
    let tenant = decider.tenant;
    let record = app
        .store
        .get_approval(tenant, id)
        .await?
        .ok_or_else(|| ToolError::not_found(format!("no approval {id} in your tenant")))?;
    if record.requester == decider.principal.id
        && !app
            .approvals
            .policy(tenant)
            .await
            .map_err(|e| ToolError::new(ErrorKind::Unavailable, e.to_string()))?
            .self_approval
    {
        return Err(ToolError::forbidden(
            "you made this call, so someone else must decide it (the tenant's policy does not allow self-approval)",
        )
        .into());
    }
    let decision = toolgate_store::approvals::Decision {
        approve,
        by: decider.principal.id,
        by_name: decider.principal.name.clone(),
        reason: if reason.is_empty() && !approve {
            "denied without a reason".to_owned()
        } else {
            reason
        },
    };
    let decided = app.store.decide_approval(tenant, id, &decision).await?;
    record_decision(app, decider, request_id, &decided)
        .await
        .map_err(|e| ApiError::Internal(anyhow::anyhow!(e)))?;
    app.executor
        .events()
        .emit(&toolgate_core::Event::ApprovalDecided {
            tenant,
            approval: id,
            approved: decided.status == "approved",
            by: decider.principal.id,
        });
    after_decision(app, &decided).await;
    Ok(decided)
}

/// Decisions made by callers on their own calls, through their MCP client's elicitation.
pub struct McpDesk(pub AppState);

#[async_trait]
impl toolgate_mcp::ApprovalDesk for McpDesk {
    async fn may_self_approve(&self, auth: &AuthContext) -> bool {
        auth.has_scope(toolgate_core::auth::scopes::APPROVALS_DECIDE)
            && self
                .0
                .approvals
                .policy(auth.tenant)
                .await
                .is_ok_and(|p| p.self_approval)
    }

    async fn decide(
        &self,
        auth: &AuthContext,
        approval: ApprovalId,
        approve: bool,
        reason: String,
    ) -> Result<(), String> {
        decide(
            &self.0,
            &Arc::new(auth.clone()),
            approval,
            approve,
            reason,
            None,
        )
        .await
        .map(|_| ())
        .map_err(|e| e.into_problem().1.detail)
    }
}

/// Sets going what `decided` allows: a waiting run resumes here, an approved REST call
/// runs here.
pub async fn after_decision(app: &AppState, decided: &ApprovalRecord) {
    if decided.run_id.is_some() {
        app.runs.resume_decided().await;
    } else if decided.adapter == Adapter::Rest.as_str() && decided.status == "approved" {
        let app = app.clone();
        let decided = decided.clone();
        tokio::spawn(async move { run_approved(&app, decided).await });
    }
}

/// Runs an approved REST call as its requester and stores its outcome.
async fn run_approved(app: &AppState, approval: ApprovalRecord) {
    let outcome = match serde_json::from_value::<AuthContext>(approval.auth.clone()) {
        Err(e) => Err(ToolError::internal(format!(
            "the requester of approval {} cannot be read: {e}",
            approval.id
        ))),
        Ok(auth) => {
            let tools = Toolset::all().scope(app.registry.clone(), &auth);
            let ctx = CallContext::new(Arc::new(auth), Adapter::Rest)
                .with_approval(Some(approval.id))
                .with_trace(None);
            let args = approval.call_arguments.clone().unwrap_or(Value::Null);
            app.executor.call(&tools, ctx, &approval.tool, args).await
        }
    };
    let stored = match outcome {
        Ok(done) => json!({"status": 200, "body": InvokeResponse::from(done)}),
        Err(err) => {
            let (status, problem, cause) = ApiError::Tool(err).into_problem();
            if let Some(cause) = cause {
                tracing::error!(approval_id = %approval.id, error = %cause, "an approved call failed internally");
            }
            json!({"status": status.as_u16(), "body": problem})
        }
    };
    if let Err(err) = app
        .store
        .set_approval_result(approval.tenant, approval.id, &stored)
        .await
    {
        tracing::error!(approval_id = %approval.id, error = %err, "the outcome of an approved call could not be stored");
    }
}

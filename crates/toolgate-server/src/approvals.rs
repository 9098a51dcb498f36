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
use toolgate_core::policy::{ApprovalError, ApprovalRequest};
use toolgate_core::{
    Adapter, Approvals, AuthContext, CallContext, Gate, Policy, TenantId, ToolError, Toolset,
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
}

#[async_trait]
impl Approvals for StoreApprovals {
    async fn policy(&self, tenant: TenantId) -> Result<Arc<Policy>, ApprovalError> {
        if let Some((at, policy)) = self.lock().get(&tenant)
            && at.elapsed() < POLICY_TTL
        {
            return Ok(policy.clone());
        }
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

    async fn gate(&self, request: ApprovalRequest) -> Result<Gate, ApprovalError> {
        let gate = self
            .store
            .gate_approval(&request)
            .await
            .map_err(|e| ApprovalError(e.to_string()))?;
        let (event, approval) = match &gate {
            Gate::Approved { approval } => ("approval.used", approval),
            Gate::Pending { approval, .. } => ("approval.pending", approval),
            Gate::Denied { approval, .. } => ("approval.denied", approval),
        };
        tracing::info!(
            target: "toolgate::approval",
            event,
            tenant = %request.tenant,
            approval_id = %approval,
            tool = %request.tool,
            call_id = %request.call_id,
            adapter = request.adapter.as_str(),
        );
        Ok(gate)
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
            let ctx =
                CallContext::new(Arc::new(auth), Adapter::Rest).with_approval(Some(approval.id));
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

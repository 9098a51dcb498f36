//! What a person's decision on an approval sets going in this gateway, and the MCP
//! door to deciding. The rules of deciding are core's
//! ([`toolgate_core::approvals::Decisions`]).
//!
//! A decision may land on any instance. An agent run waiting on it is taken over by the
//! instance that received the decision (or, failing that, by the next periodic claim of
//! any instance). A REST call approved is run by the deciding instance, as its
//! requester, and its outcome stored for `GET /v1/calls/{call_id}`. An MCP client makes
//! the call again, which uses the approval.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::{Value, json};
use toolgate_core::approvals::DecideError;
use toolgate_core::stores::{ApprovalRecord, ApprovalStatus, ApprovalStore as _};
use toolgate_core::{Adapter, ApprovalId, AuthContext, CallContext, ToolError, Toolset};

use crate::error::ApiError;
use crate::outcome::InvokeResponse;
use crate::state::AppState;

/// A person decides approval `id`, through any front door: core's rules
/// ([`Decisions::decide`](toolgate_core::approvals::Decisions::decide)), then what the
/// decision allows is set going ([`after_decision`]).
pub async fn decide(
    app: &AppState,
    decider: &Arc<AuthContext>,
    id: ApprovalId,
    approve: bool,
    reason: String,
    request_id: Option<&str>,
) -> Result<ApprovalRecord, ApiError> {
    let decided = app
        .decisions
        .decide(decider, id, approve, reason, request_id)
        .await
        .map_err(|e| match e {
            DecideError::Refused(e) => ApiError::Tool(e),
            DecideError::Store(e) => e.into(),
            DecideError::Audit(e) => ApiError::Internal(anyhow::anyhow!(e)),
        })?;
    after_decision(app, &decided).await;
    Ok(decided)
}

/// Decisions made by callers on their own calls, through their MCP client's elicitation.
pub struct ElicitedApprovals(pub AppState);

#[async_trait]
impl toolgate_mcp::ApprovalDesk for ElicitedApprovals {
    async fn may_self_approve(&self, auth: &AuthContext) -> bool {
        self.0.decisions.may_self_approve(auth).await
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
    } else if decided.adapter == Adapter::Rest && decided.status == ApprovalStatus::Approved {
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

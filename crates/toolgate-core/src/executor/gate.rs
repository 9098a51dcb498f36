//! The policy step of a call: the tenant's extra scopes by risk, then allow, deny, or a
//! person's approval (asked for, waited on, or used up).

use std::sync::Arc;

use serde_json::Value;

use super::{Executor, store_failure};
use crate::audit::AuditRecord;
use crate::policy::{Action, ApprovalError, ApprovalRequest, Gate, Policy};
use crate::{CallContext, ErrorKind, Event, GateEvent, RegisteredTool, ToolError};

impl Executor {
    /// The tenant's policy for this call: extra scopes by risk, then allow, deny, or a
    /// person's approval (asked for, waited on, or used up). Fails closed.
    pub(super) async fn apply_policy(
        &self,
        ctx: &CallContext,
        policy: Result<Arc<Policy>, ApprovalError>,
        tool: &RegisteredTool,
        args: &Value,
        record: &mut AuditRecord,
    ) -> Result<(), ToolError> {
        let spec = tool.spec();
        // Fails closed: a call whose policy or approval cannot be read is not run; for
        // now (503, retryable) when the store is only out of reach for now.
        let unavailable = |cause: ApprovalError| {
            store_failure(
                cause.transient,
                cause.to_string(),
                true,
                "the approval policy cannot be read right now, so this call was not run",
                "the approval policy could not be read, so this call was not run",
            )
        };
        let policy = policy.map_err(unavailable)?;
        if let Some(scope) = policy.risk_scopes.get(&spec.risk)
            && !ctx.auth.has_scope(scope)
        {
            return Err(ToolError::forbidden(format!(
                "calling {} needs the scope {scope:?} (the tenant's policy for {:?}-risk tools), which your credentials lack",
                spec.name, spec.risk
            )));
        }
        match policy.decide(&spec.name, spec.risk, ctx.agent.as_deref()) {
            Action::Allow => return Ok(()),
            Action::Deny => {
                return Err(ToolError::new(
                    ErrorKind::Denied,
                    format!("the tenant's policy does not allow calling {}", spec.name),
                ));
            }
            Action::Require => {}
        }
        let request = ApprovalRequest {
            tenant: ctx.auth.tenant,
            call_id: ctx.call_id,
            requester: ctx.auth.principal.id,
            requester_name: ctx.auth.principal.name.clone(),
            auth: (*ctx.auth).clone(),
            adapter: ctx.adapter,
            tool: spec.name.clone(),
            risk: spec.risk,
            arguments: record.arguments.clone(),
            call_arguments: args.clone(),
            arguments_hash: record.arguments_hash.clone(),
            run: ctx.run,
            agent: ctx.agent.clone(),
            presented: ctx.approval,
            expires_at: std::time::SystemTime::now() + policy.approval_ttl(),
        };
        let gate = self.approvals.gate(request).await.map_err(unavailable)?;
        let (approval, seen, result) = match gate {
            Gate::Approved { approval } => (approval, GateEvent::Used, Ok(())),
            Gate::Pending {
                approval,
                expires_at,
            } => {
                let expires_in = expires_at
                    .duration_since(std::time::SystemTime::now())
                    .unwrap_or_default();
                let waits = ToolError::awaiting_approval(&spec.name, approval, expires_in);
                (approval, GateEvent::Pending, Err(waits))
            }
            Gate::Denied {
                approval,
                reason,
                decided_by,
            } => {
                let denied =
                    crate::policy::denied(&spec.name, approval, &reason, decided_by.as_deref());
                (approval, GateEvent::Denied, Err(denied))
            }
            // No approval to name: none was asked for.
            Gate::Crowded {
                waiting,
                by_requester,
            } => {
                return Err(crate::policy::crowded(&spec.name, waiting, by_requester));
            }
        };
        self.events.emit(&Event::ApprovalGate {
            ctx,
            tool: &spec.name,
            approval,
            gate: seen,
        });
        record.approval = Some(approval);
        result
    }
}

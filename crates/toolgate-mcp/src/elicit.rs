//! A held call decided by its own caller: the MCP client's user asked through form
//! elicitation, where the client supports it and the tenant lets callers decide their
//! own calls. The decision goes through the same rules as REST's (the [`ApprovalDesk`]).

use super::*;

impl McpAdapter {
    /// Asks the client's user to approve or deny a held call, when the client supports
    /// form elicitation and the tenant lets callers decide their own calls. Returns the
    /// approval once decided (either way); `None` leaves the call held.
    pub(crate) async fn ask_user(
        &self,
        auth: &AuthContext,
        context: &RequestContext<RoleServer>,
        tool: &str,
        err: &ToolError,
    ) -> Option<ApprovalId> {
        let desk = self.desk.as_ref()?;
        let approval: ApprovalId = err.awaiting_approval?.approval;
        if !context
            .peer
            .supported_elicitation_modes()
            .contains(&rmcp::service::ElicitationMode::Form)
            || !desk.may_self_approve(auth).await
        {
            return None;
        }
        let schema = rmcp::model::ElicitationSchema::builder()
            .required_bool("approve")
            .optional_string("reason")
            .description("Approve or deny this tool call")
            .build()
            .ok()?;
        let asked = context
            .peer
            .create_elicitation_with_timeout(
                rmcp::model::ElicitRequestParams::FormElicitationParams {
                    meta: None,
                    message: format!(
                        "The tool {tool} needs your approval before it runs (approval {approval}). Allow it?"
                    ),
                    requested_schema: schema,
                },
                Some(std::time::Duration::from_secs(300)),
            )
            .await
            .ok()?;
        let content = asked.content.unwrap_or_default();
        let (approve, reason) = match asked.action {
            rmcp::model::ElicitationAction::Accept => (
                content
                    .get("approve")
                    .and_then(Value::as_bool)
                    .unwrap_or(false),
                content
                    .get("reason")
                    .and_then(Value::as_str)
                    .unwrap_or("decided by the user through their MCP client")
                    .to_owned(),
            ),
            rmcp::model::ElicitationAction::Decline => (false, "declined by the user".to_owned()),
            // Dismissed (or an action this version does not know): nobody decided; the
            // approval stays pending for someone else.
            _ => return None,
        };
        match desk.decide(auth, approval, approve, reason).await {
            Ok(()) => Some(approval),
            Err(e) => {
                tracing::warn!(approval_id = %approval, error = %e, "an elicited decision could not be recorded");
                None
            }
        }
    }
}

/// Core's decisions are the desk: the same rules, audit row, event and follow-ups as a
/// decision made over REST.
#[async_trait::async_trait]
impl<S> ApprovalDesk for toolgate_core::approvals::Decisions<S>
where
    S: toolgate_core::stores::ApprovalStore + 'static,
{
    async fn may_self_approve(&self, auth: &AuthContext) -> bool {
        toolgate_core::approvals::Decisions::may_self_approve(self, auth).await
    }

    async fn decide(
        &self,
        auth: &AuthContext,
        approval: ApprovalId,
        approve: bool,
        reason: String,
    ) -> Result<(), String> {
        toolgate_core::approvals::Decisions::decide(
            self,
            &Arc::new(auth.clone()),
            approval,
            approve,
            reason,
            None,
        )
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
    }
}

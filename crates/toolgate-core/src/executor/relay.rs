//! Relaying what a front door does for its caller that is not a tool call, through the
//! steps of a call.

use super::*;

impl Executor {
    /// Runs `operation`, something a front door relays for its caller that is not a tool
    /// call (MCP `resources/read`, `prompts/get`, `completion/complete`), through the
    /// steps of a call but the tool's own: admission, authorization (`tools:invoke`), the
    /// tenant's policy (a rule denying `method`), the deadline and cancellation, events,
    /// metrics, and one audit row whose `tool` is `method` and whose `arguments` are
    /// `args` (masked by name). `operation` runs in a task of its own, so that the row is
    /// written even when the caller goes away (which cancels it).
    pub async fn relay<T, F>(
        &self,
        ctx: CallContext,
        method: &str,
        args: Value,
        timeout: Duration,
        operation: F,
    ) -> Result<T, ToolError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, ToolError>> + Send + 'static,
    {
        let started = Instant::now();
        let policy = self.approvals.policy(ctx.auth.tenant).await;
        let admitted = self
            .admit(&ctx, method, policy.as_deref().ok())
            .map_err(|refusal| refusal.error)?;
        self.events.emit(&Event::CallStarted {
            ctx: &ctx,
            tool: method,
        });
        let masked = self.masked(None, &args);
        let secrets = crate::secrets::masked_values(&args, &masked);
        let record = AuditRecord::start(&ctx, method, masked, self.digest.digest(&args));
        let cancel_on_drop = ctx.cancel.clone().drop_guard();
        let this = self.clone();
        let method = method.to_owned();
        let task = tokio::spawn(async move {
            let allowed = if !ctx.auth.has_scope(scopes::TOOLS_INVOKE) {
                Err(ToolError::forbidden(format!(
                    "{method} needs the scope {:?}, which your credentials lack",
                    scopes::TOOLS_INVOKE
                )))
            } else {
                match policy {
                    Err(err) => {
                        let mut refused = ToolError::new(
                            ErrorKind::Internal,
                            "the policy could not be read, so this was not done",
                        );
                        refused.cause = Some(err.to_string());
                        Err(refused)
                    }
                    // Only a rule denies (levels ask for approval, never deny).
                    Ok(policy)
                        if policy.decide(&method, Risk::Low, ctx.agent.as_deref())
                            == Action::Deny =>
                    {
                        Err(ToolError::new(
                            ErrorKind::Denied,
                            format!("the tenant's policy does not allow {method}"),
                        ))
                    }
                    Ok(_) => Ok(()),
                }
            };
            let result = match allowed {
                Err(err) => Err(err),
                Ok(()) => tokio::select! {
                    biased;
                    () = ctx.cancel.cancelled() => Err(ToolError::new(ErrorKind::Cancelled, "the request was cancelled")),
                    done = tokio::time::timeout(timeout, operation) => done.unwrap_or_else(|_| Err(ToolError::new(
                        ErrorKind::Timeout,
                        format!("{method} did not finish within {} s", timeout.as_secs_f64()),
                    ))),
                },
            };
            drop(admitted);
            this.settle(
                record,
                &secrets,
                &ctx,
                &method,
                true,
                result,
                started.elapsed(),
            )
            .await
            .map(|(value, _)| value)
        });
        let joined = task.await;
        cancel_on_drop.disarm();
        joined.unwrap_or_else(|join_err| Err(ToolError::internal(join_err)))
    }
}

//! The authorization step: the scopes calling a tool takes.

use super::*;

/// The scopes calling a tool takes: `tools:invoke`, the tool's own required scope, and
/// `tools:high_risk` for high-risk tools.
fn needed_scopes(spec: &crate::ToolSpec) -> impl Iterator<Item = &str> {
    let high_risk = (spec.risk == Risk::High).then_some(scopes::TOOLS_HIGH_RISK);
    [
        Some(scopes::TOOLS_INVOKE),
        spec.required_scope.as_deref(),
        high_risk,
    ]
    .into_iter()
    .flatten()
}

/// Whether `auth`'s scopes let it call a tool declared as `spec` (what the executor's
/// authorization step checks; the tenant's policy may still ask for more). For what an
/// agent declares to its model: exactly the tools the run may call.
pub fn may_call(auth: &crate::AuthContext, spec: &crate::ToolSpec) -> bool {
    needed_scopes(spec).all(|scope| auth.has_scope(scope))
}

/// The caller needs every scope of [`needed_scopes`].
pub(super) fn authorize(ctx: &CallContext, tool: &RegisteredTool) -> Result<(), ToolError> {
    let spec = tool.spec();
    for scope in needed_scopes(spec) {
        if !ctx.auth.has_scope(scope) {
            return Err(ToolError::forbidden(format!(
                "calling {} needs the scope {scope:?}, which your credentials lack",
                spec.name
            ))
            .with_details(serde_json::json!({"required_scope": scope})));
        }
    }
    Ok(())
}

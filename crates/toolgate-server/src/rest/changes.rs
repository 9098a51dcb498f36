//! Administrative changes through the API, recorded in the audit log beside the calls:
//! one row of adapter `admin` per change, in the caller's tenant's chain (a new tenant's
//! creation: in the new tenant's, as its first row), naming who made it, the operation (`keys.revoke`, `policy.update`…) as the row's `tool`, and what it
//! named or set as its `arguments` (ids, names and settings: never a secret, which these
//! requests keep apart and the store holds only sealed or hashed).
//!
//! The change is committed first; a row that then cannot be written fails the request
//! (503 when the store is out of reach for now) though the change stands, as a decision
//! on an approval does.

use serde_json::Value;
use toolgate_core::audit::AuditRecord;
use toolgate_core::{Adapter, CallContext};

use crate::auth::Caller;
use crate::error::ApiError;
use crate::state::AppState;

/// Records `operation` by `caller` with `arguments` (see the module's doc).
pub async fn record(
    app: &AppState,
    caller: &Caller,
    operation: &str,
    arguments: Value,
) -> Result<(), ApiError> {
    record_in(
        app,
        caller.auth.clone(),
        &caller.request_id,
        operation,
        arguments,
    )
    .await
}

/// Records `operation` by `caller` in the chain of `tenant` (not the caller's).
pub async fn record_for(
    app: &AppState,
    caller: &Caller,
    tenant: toolgate_core::TenantId,
    operation: &str,
    arguments: Value,
) -> Result<(), ApiError> {
    let by = toolgate_core::AuthContext::recording_in(tenant, Some(&caller.auth));
    record_in(app, by, &caller.request_id, operation, arguments).await
}

async fn record_in(
    app: &AppState,
    by: std::sync::Arc<toolgate_core::AuthContext>,
    request_id: &str,
    operation: &str,
    arguments: Value,
) -> Result<(), ApiError> {
    let mut ctx = CallContext::new(by, Adapter::Admin);
    ctx.request_id = Some(request_id.to_owned());
    app.audit
        .record(AuditRecord::admin_change(&ctx, operation, arguments))
        .await
        .map_err(|err| {
            tracing::error!(operation, error = %err.message, "an administrative change is made but could not be audited");
            crate::error::audit_failure(err)
        })
}

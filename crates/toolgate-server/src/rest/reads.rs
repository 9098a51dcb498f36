//! REST reads per principal (`limits.principal_reads_per_minute`): a `GET` past its
//! principal's share on this instance is refused with 429 and `Retry-After`, and counted
//! (`toolgate_admission_rejections_total`, limit `reads`). Reads are no tool calls, so
//! the executor never sees them; without this, one key's reads could take every core of
//! an instance (the tenant's pool share bounds only their database work). A request
//! whose credential does not hold passes on, for its handler to refuse as ever; routes
//! that take no credential (health, documents) never look at it.

use axum::extract::{Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::auth::Authenticated;
use crate::error::ApiError;
use crate::state::AppState;

/// Counts a `GET` against its caller's reads, or refuses it (layered only where
/// `limits.principal_reads_per_minute` is set). The authentication done
/// here is the handler's (its `Caller` extractor finds it, a failure included): no
/// request is authenticated twice.
pub async fn limit(State(app): State<AppState>, request: Request, next: Next) -> Response {
    if request.method() != Method::GET {
        return next.run(request).await;
    }
    let (mut parts, body) = request.into_parts();
    let done = app.authenticator.authenticate(&parts).await;
    if let Ok(caller) = &done
        && let Err(refusal) = app.admission.admit_read(&caller.auth)
    {
        app.executor.metrics().rejected(
            caller.auth.tenant,
            refusal.limit,
            toolgate_core::Adapter::Rest,
        );
        return ApiError::Tool(refusal.error).into_response();
    }
    parts.extensions.insert(Authenticated(done));
    next.run(Request::from_parts(parts, body)).await
}

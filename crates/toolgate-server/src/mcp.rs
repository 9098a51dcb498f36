//! `/mcp`: rmcp's Streamable HTTP service behind the same bearer authentication as REST,
//! with each session bound to the principal that opened it, and the RFC 9728
//! protected-resource metadata that tells OAuth-capable clients where tokens come from.
//!
//! rmcp does the protocol: POST (JSON or SSE answers), GET (server-to-client stream),
//! DELETE (end of session), `MCP-Protocol-Version`, sessions for versions before
//! 2026-07-28 and stateless requests from 2026-07-28 on, `Host` and `Origin` checks, the
//! body limit and JSON-RPC errors for malformed input. This module only decides who may
//! reach it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::{
    SessionState, SessionStore, SessionStoreError,
};
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use tokio_util::sync::CancellationToken;
use toolgate_core::auth::scopes;
use toolgate_core::{ErrorKind, PrincipalId, TenantId, ToolError};
use toolgate_mcp::{McpAdapter, McpCaller};
use toolgate_store::{McpSession, Store, StoreError};

use crate::config::Config;
use crate::request_id::RequestId;
use crate::rest::error::ApiError;
use crate::state::AppState;

const SESSION_HEADER: &str = "mcp-session-id";
/// Where clients find the metadata for the `/mcp` resource (RFC 9728 §3.1).
const METADATA_PATH: &str = "/.well-known/oauth-protected-resource/mcp";
/// Cached session owners older than this are dropped when the cache grows large.
const OWNER_TTL: Duration = Duration::from_secs(24 * 3600);
const OWNERS_SWEEP_AT: usize = 10_000;

type Owner = (TenantId, PrincipalId);

tokio::task_local! {
    /// The caller of the `/mcp` request being served: rmcp persists a new session from
    /// inside that request, and the session is recorded as this caller's.
    static CALLER: Owner;
}

/// Sessions in the store (any instance can take one over), with their owners cached:
/// ownership never changes, so the cache is never stale about it.
struct Sessions {
    store: Store,
    owners: Mutex<HashMap<String, (Owner, Instant)>>,
}

impl Sessions {
    /// Who opened session `id`, if it exists anywhere.
    async fn owner(&self, id: &str) -> Result<Option<Owner>, StoreError> {
        if let Some((owner, _)) = self.lock().get(id) {
            return Ok(Some(*owner));
        }
        let found = self.store.mcp_session(id).await?;
        Ok(found.map(|s| {
            let owner = (s.tenant, s.principal);
            self.remember(id, owner);
            owner
        }))
    }

    fn remember(&self, id: &str, owner: Owner) {
        let mut owners = self.lock();
        if owners.len() >= OWNERS_SWEEP_AT {
            owners.retain(|_, (_, at)| at.elapsed() < OWNER_TTL);
        }
        owners.insert(id.to_owned(), (owner, Instant::now()));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Owner, Instant)>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// rmcp's hook for sessions that outlive one instance: the session's `initialize`
/// parameters, stored with its owner, so another instance can replay the handshake.
#[async_trait]
impl SessionStore for Sessions {
    async fn load(&self, id: &str) -> Result<Option<SessionState>, SessionStoreError> {
        let Some(session) = self.store.mcp_session(id).await? else {
            return Ok(None);
        };
        let params = serde_json::from_str(&session.initialize_params)?;
        Ok(Some(SessionState::new(params)))
    }

    async fn store(&self, id: &str, state: &SessionState) -> Result<(), SessionStoreError> {
        let (tenant, principal) = CALLER
            .try_with(|owner| *owner)
            .map_err(|_| "a session opened outside an authenticated request")?;
        self.store
            .put_mcp_session(&McpSession {
                id: id.to_owned(),
                tenant,
                principal,
                initialize_params: serde_json::to_string(&state.initialize_params)?,
            })
            .await?;
        self.remember(id, (tenant, principal));
        Ok(())
    }

    async fn delete(&self, id: &str) -> Result<(), SessionStoreError> {
        let (tenant, _) = CALLER
            .try_with(|owner| *owner)
            .map_err(|_| "a session ended outside an authenticated request")?;
        self.store.delete_mcp_session(tenant, id).await?;
        self.lock().remove(id);
        Ok(())
    }
}

#[derive(Clone)]
struct Guard {
    state: AppState,
    sessions: Arc<Sessions>,
    public_url: Option<String>,
    authorization_servers: Vec<String>,
}

/// The `/mcp` route and the protected-resource metadata. `shutdown` ends open SSE
/// streams and sessions when the gateway stops.
pub fn router(state: AppState, config: &Config, shutdown: CancellationToken) -> Router {
    let adapter = McpAdapter::new(state.registry.clone(), state.executor.clone());
    let mcp = &config.mcp;
    let sessions = Arc::new(Sessions {
        store: state.store.clone(),
        owners: Mutex::default(),
    });
    let mut transport = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(mcp.sessions)
        .with_cancellation_token(shutdown)
        .with_max_request_body_bytes(config.http.max_body_bytes)
        .with_allowed_origins(mcp.allowed_origins.clone())
        .enforce_origin_validation();
    transport.session_store = Some(sessions.clone());
    transport = if mcp.allowed_hosts.iter().any(|h| h == "*") {
        transport.disable_allowed_hosts()
    } else {
        transport.with_allowed_hosts(mcp.allowed_hosts.clone())
    };
    let service = StreamableHttpService::new(
        move || Ok(adapter.clone()),
        Arc::new(LocalSessionManager::default()),
        transport,
    );
    let guard = Guard {
        state,
        sessions,
        public_url: mcp
            .public_url
            .as_ref()
            .map(|u| u.trim_end_matches('/').to_owned()),
        authorization_servers: mcp.authorization_servers.clone(),
    };
    Router::new()
        .route_service("/mcp", service)
        .layer(middleware::from_fn_with_state(guard.clone(), authenticate))
        .route("/.well-known/oauth-protected-resource", get(metadata))
        .route(METADATA_PATH, get(metadata))
        .with_state(guard)
}

impl Guard {
    fn base_url(&self, headers: &HeaderMap) -> String {
        if let Some(url) = &self.public_url {
            return url.clone();
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        format!("http://{host}")
    }
}

/// Authenticates every `/mcp` request and keeps sessions with their owners.
async fn authenticate(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let authenticator = &guard.state.authenticator;
    let caller = match authenticator.authenticate(&parts).await {
        Ok(caller) => caller,
        Err(err) => {
            if err.kind == ErrorKind::Unauthenticated {
                authenticator.security_event(&parts, &err.message);
            }
            return unauthorized(&guard, &parts.headers, err);
        }
    };
    let owner = (caller.auth.tenant, caller.auth.principal.id);
    let session = parts
        .headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(id) = &session {
        let known = match guard.sessions.owner(id).await {
            Ok(known) => known,
            Err(err) => return ApiError::from(err).into_response(),
        };
        if known.is_some_and(|o| o != owner) {
            tracing::warn!(
                tenant = %owner.0,
                principal = %owner.1,
                "refused an MCP session id presented by a principal other than its owner"
            );
            // The same answer as for an unknown session: another principal's session ids
            // are not confirmed to exist.
            return ApiError::from(ToolError::not_found("no such MCP session")).into_response();
        }
    }
    let request_id = parts.extensions.get::<RequestId>().map(|r| r.0.to_string());
    let ending = parts.method == Method::DELETE;
    parts.extensions.insert(McpCaller {
        auth: caller.auth,
        toolset: caller.toolset,
        request_id,
    });
    let mut response = CALLER
        .scope(owner, next.run(Request::from_parts(parts, body)))
        .await;
    // rmcp answers a successful DELETE with 202; the Python SDK treats anything but 200
    // as a failed termination and logs it on every close.
    if ending && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// 401 naming the protected-resource metadata, so OAuth clients can find a token issuer.
fn unauthorized(guard: &Guard, headers: &HeaderMap, err: ToolError) -> Response {
    let presented = headers.contains_key(header::AUTHORIZATION);
    let mut response = ApiError::from(err).into_response();
    let metadata = format!("{}{METADATA_PATH}", guard.base_url(headers));
    let challenge = if presented {
        format!(r#"Bearer resource_metadata="{metadata}", error="invalid_token""#)
    } else {
        format!(r#"Bearer resource_metadata="{metadata}""#)
    };
    match HeaderValue::from_str(&challenge) {
        Ok(value) => {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        Err(_) => *response.status_mut() = StatusCode::UNAUTHORIZED,
    }
    response
}

/// RFC 9728 protected-resource metadata for `/mcp`.
async fn metadata(State(guard): State<Guard>, headers: HeaderMap) -> Response {
    let base = guard.base_url(&headers);
    axum::Json(json!({
        "resource": format!("{base}/mcp"),
        "authorization_servers": guard.authorization_servers,
        "bearer_methods_supported": ["header"],
        "scopes_supported": [
            scopes::TOOLS_INVOKE,
            scopes::TOOLS_HIGH_RISK,
            scopes::AUDIT_READ,
            scopes::AGENTS_RUN,
            scopes::AGENTS_MANAGE,
            scopes::APPROVALS_DECIDE,
            scopes::TENANT_ADMIN,
        ],
        "resource_name": "toolgate",
    }))
    .into_response()
}

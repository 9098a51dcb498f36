//! Who is calling, made once per request.
//!
//! `Authorization: Bearer <token>`, where the token is an API key (`tg_…`, looked up by
//! its hash) or a JWT (see [`crate::jwt`]). Missing or bad credentials are 401 with
//! `WWW-Authenticate`; those attempts have no tenant, so they go to the rate-limited
//! security-event log (source address, route, reason — never the token). Handlers take a
//! [`Caller`]; nothing below this module parses tokens.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, FromRef, FromRequestParts, MatchedPath};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use chrono::Utc;
use toolgate_core::auth::scopes;
use toolgate_core::{
    AuthContext, ErrorKind, Principal, Registry, ScopedToolset, ToolError, Toolset,
};
use toolgate_store::{Store, keys};
use uuid::Uuid;

use crate::jwt::JwtVerifier;
use crate::rest::error::ApiError;

/// Scopes each role grants when a principal is created without explicit scopes.
pub fn role_scopes(role: &str) -> &'static [&'static str] {
    match role {
        "admin" => &[
            scopes::TOOLS_INVOKE,
            scopes::TOOLS_HIGH_RISK,
            scopes::AUDIT_READ,
            scopes::AGENTS_RUN,
            scopes::AGENTS_MANAGE,
            scopes::APPROVALS_DECIDE,
            scopes::TENANT_ADMIN,
        ],
        "operator" => &[
            scopes::TOOLS_INVOKE,
            scopes::TOOLS_HIGH_RISK,
            scopes::AUDIT_READ,
            scopes::AGENTS_RUN,
            scopes::AGENTS_MANAGE,
            scopes::APPROVALS_DECIDE,
        ],
        "member" => &[scopes::TOOLS_INVOKE, scopes::AGENTS_RUN],
        _ => &[],
    }
}

/// Creating and listing tenants: held only by the operator's bootstrap admin.
pub const TENANTS_MANAGE: &str = "tenants:manage";

/// How often a key's `last_used_at` is written, at most.
const TOUCH_EVERY: Duration = Duration::from_secs(60);
/// Most security events written per second; the rest are counted and dropped.
const SECURITY_EVENTS_PER_SEC: u32 = 20;

/// Turns a request into a [`Caller`].
pub struct Authenticator {
    store: Store,
    jwt: Option<JwtVerifier>,
    touched: Mutex<HashMap<Uuid, Instant>>,
    security_window: Mutex<(Instant, u32)>,
}

impl std::fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authenticator")
            .field("jwt", &self.jwt.is_some())
            .finish()
    }
}

impl Authenticator {
    pub fn new(store: Store, jwt: Option<JwtVerifier>) -> Self {
        Self {
            store,
            jwt,
            touched: Mutex::new(HashMap::new()),
            security_window: Mutex::new((Instant::now(), 0)),
        }
    }

    async fn authenticate(&self, parts: &Parts) -> Result<Caller, ToolError> {
        let token = bearer(parts)?;
        let auth = if keys::looks_like_key(token) {
            self.api_key(token).await?
        } else if let Some(jwt) = &self.jwt {
            jwt.verify(token).await?
        } else {
            return Err(unauthenticated("invalid credentials"));
        };
        Ok(Caller {
            auth: Arc::new(auth),
            toolset: Toolset::all(),
        })
    }

    async fn api_key(&self, secret: &str) -> Result<AuthContext, ToolError> {
        let found = self
            .store
            .find_key(secret)
            .await
            .map_err(ToolError::internal)?;
        let Some(found) = found else {
            return Err(unauthenticated("invalid credentials"));
        };
        let now = Utc::now();
        if found.key.revoked_at.is_some() || found.key.expires_at.is_some_and(|t| t <= now) {
            return Err(unauthenticated("invalid credentials"));
        }
        self.touch(found.key.id);
        // A key never grants more than its principal holds.
        let scopes = found
            .key
            .scopes
            .iter()
            .filter(|s| found.principal.scopes.contains(s))
            .cloned()
            .collect();
        Ok(AuthContext {
            tenant: found.principal.tenant,
            tenant_name: found.tenant_name,
            principal: Principal {
                id: found.principal.id,
                kind: found.principal.kind,
                name: found.principal.name,
            },
            roles: found.principal.roles,
            scopes,
        })
    }

    /// Notes the key's use, at most once a minute per key, off the request path.
    fn touch(&self, key: Uuid) {
        let now = Instant::now();
        {
            let mut touched = self.touched.lock().unwrap_or_else(|p| p.into_inner());
            if touched
                .get(&key)
                .is_some_and(|t| now.duration_since(*t) < TOUCH_EVERY)
            {
                return;
            }
            touched.insert(key, now);
        }
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(err) = store.touch_key(key, Utc::now()).await {
                tracing::warn!(error = %err, "could not record an API key's last use");
            }
        });
    }

    /// Records a failed authentication, rate-limited.
    fn security_event(&self, parts: &Parts, reason: &str) {
        {
            let mut window = self
                .security_window
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            if now.duration_since(window.0) >= Duration::from_secs(1) {
                *window = (now, 0);
            }
            window.1 += 1;
            if window.1 > SECURITY_EVENTS_PER_SEC {
                return;
            }
        }
        let source = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip().to_string());
        let route = parts
            .extensions
            .get::<MatchedPath>()
            .map(|p| p.as_str().to_owned())
            .unwrap_or_else(|| parts.uri.path().chars().take(200).collect());
        let reason = reason.to_owned();
        tracing::warn!(
            source = source.as_deref().unwrap_or(""),
            route,
            reason,
            "authentication failed"
        );
        let store = self.store.clone();
        tokio::spawn(async move {
            if let Err(err) = store
                .record_security_event(source.as_deref(), &route, &reason)
                .await
            {
                tracing::warn!(error = %err, "could not record a security event");
            }
        });
    }
}

fn unauthenticated(message: &str) -> ToolError {
    ToolError::new(ErrorKind::Unauthenticated, message)
        .with_suggestion("send Authorization: Bearer <API key or JWT>")
}

fn bearer(parts: &Parts) -> Result<&str, ToolError> {
    let header = parts
        .headers
        .get(AUTHORIZATION)
        .ok_or_else(|| unauthenticated("missing bearer token"))?;
    let value = header
        .to_str()
        .map_err(|_| unauthenticated("malformed Authorization header"))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| unauthenticated("malformed Authorization header"))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(unauthenticated("the Authorization scheme must be Bearer"));
    }
    Ok(token.trim())
}

/// The authenticated caller of one request and the toolset it may use.
#[derive(Clone, Debug)]
pub struct Caller {
    pub auth: Arc<AuthContext>,
    pub toolset: Toolset,
}

impl Caller {
    /// The caller's toolset over `registry`: the capability the executor takes.
    pub fn tools(&self, registry: &Arc<Registry>) -> ScopedToolset {
        self.toolset.scope(registry.clone(), &self.auth)
    }

    /// 403 unless the caller holds `scope`.
    pub fn require(&self, scope: &str) -> Result<(), ApiError> {
        if self.auth.has_scope(scope) {
            Ok(())
        } else {
            Err(ToolError::forbidden(format!(
                "this needs the scope {scope:?}, which your credentials lack"
            ))
            .into())
        }
    }
}

impl<S> FromRequestParts<S> for Caller
where
    Arc<Authenticator>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        let authenticator = Arc::<Authenticator>::from_ref(state);
        match authenticator.authenticate(parts).await {
            Ok(caller) => Ok(caller),
            Err(err) => {
                if err.kind == ErrorKind::Unauthenticated {
                    authenticator.security_event(parts, &err.message);
                }
                Err(err.into())
            }
        }
    }
}

//! Who is calling, made once per request.
//!
//! This version has a single built-in tenant and operator principal and no credentials:
//! the configuration refuses any non-loopback listen address (see `config.rs`), so only
//! processes on this machine reach it. Tenants, API keys and JWTs replace this module's
//! `Authenticator` without changing a handler: handlers already take a [`Caller`].

use std::sync::Arc;

use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use toolgate_core::auth::scopes;
use toolgate_core::{
    AuthContext, Principal, PrincipalId, PrincipalKind, Registry, ScopedToolset, TenantId, Toolset,
};

use crate::rest::error::ApiError;

/// Turns a request into a [`Caller`].
#[derive(Debug)]
pub struct Authenticator {
    local: Arc<AuthContext>,
}

impl Authenticator {
    /// The loopback-only operator: every scope, every tool.
    pub fn loopback_operator() -> Self {
        let all = [
            scopes::TOOLS_INVOKE,
            scopes::TOOLS_HIGH_RISK,
            scopes::AUDIT_READ,
            scopes::AGENTS_RUN,
            scopes::AGENTS_MANAGE,
            scopes::APPROVALS_DECIDE,
            scopes::TENANT_ADMIN,
        ];
        Self {
            local: Arc::new(AuthContext {
                tenant: TenantId::new(),
                principal: Principal {
                    id: PrincipalId::new(),
                    kind: PrincipalKind::User,
                    name: "local-operator".into(),
                },
                roles: vec!["admin".into()],
                scopes: all.iter().map(|s| s.to_string()).collect(),
            }),
        }
    }

    fn authenticate(&self, _parts: &Parts) -> Result<Caller, ApiError> {
        Ok(Caller {
            auth: self.local.clone(),
            toolset: Toolset::all(),
        })
    }
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
}

impl<S> FromRequestParts<S> for Caller
where
    Arc<Authenticator>: FromRef<S>,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Arc::<Authenticator>::from_ref(state).authenticate(parts)
    }
}

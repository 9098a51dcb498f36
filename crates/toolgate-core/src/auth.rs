//! Who is calling. Made once per request by an adapter's auth layer and passed down;
//! nothing below the adapter parses tokens.

use serde::{Deserialize, Serialize};

use crate::{PrincipalId, TenantId};

/// Scopes toolgate checks. Tokens may carry others; they are kept and ignored.
pub mod scopes {
    pub const TOOLS_INVOKE: &str = "tools:invoke";
    pub const TOOLS_HIGH_RISK: &str = "tools:high_risk";
    pub const AUDIT_READ: &str = "audit:read";
    pub const AGENTS_RUN: &str = "agents:run";
    pub const AGENTS_MANAGE: &str = "agents:manage";
    pub const APPROVALS_DECIDE: &str = "approvals:decide";
    pub const TENANT_ADMIN: &str = "tenant:admin";
    /// Creating and listing tenants, and the operator's own resources: held only by the
    /// operator's bootstrap admin (never in [`ALL`], never taken from a token unmapped).
    pub const TENANTS_MANAGE: &str = "tenants:manage";

    /// Every scope the gateway knows (what an admin holds).
    pub const ALL: &[&str] = &[
        TOOLS_INVOKE,
        TOOLS_HIGH_RISK,
        AUDIT_READ,
        AGENTS_RUN,
        AGENTS_MANAGE,
        APPROVALS_DECIDE,
        TENANT_ADMIN,
    ];
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalKind {
    User,
    ServiceAccount,
}

/// A user or service account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Principal {
    pub id: PrincipalId,
    pub kind: PrincipalKind,
    /// Display name (user name, key name); not an identifier.
    pub name: String,
}

/// The bearer token a caller signed in with, when it was a token from the identity
/// provider (a JWT), kept only for the request: an upstream configured for token
/// exchange (RFC 8693) trades it for a token of its own. Never serialized, never shown
/// (`Debug` hides it), never sent to an upstream as it is.
#[derive(Clone)]
pub struct SubjectToken(std::sync::Arc<str>);

impl SubjectToken {
    pub fn new(token: &str) -> Self {
        Self(token.into())
    }

    /// The token itself, for the exchange request only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SubjectToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SubjectToken(***)")
    }
}

/// The caller of one request: tenant, principal, roles and scopes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthContext {
    pub tenant: TenantId,
    /// The tenant's unique name (`^[a-z0-9][a-z0-9-]{0,62}$`), used for paths and logs.
    pub tenant_name: String,
    pub principal: Principal,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
    /// The API key the caller signed in with; none for a JWT or the gateway's own work.
    /// Work that outlives its request (an agent run, a call waiting for approval) stops
    /// standing once this key is revoked ([`Standing`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<uuid::Uuid>,
}

/// Whether a caller's credential still stands, for work that outlives the request that
/// began it: an agent run goes on for minutes, a call waits days for its approval.
#[async_trait::async_trait]
pub trait Standing: Send + Sync {
    /// Why `auth` no longer stands (its API key was revoked or has expired); `None` while
    /// it does, and while that cannot be told (the store out of reach: work is not stopped
    /// for that).
    async fn lapsed(&self, auth: &AuthContext) -> Option<String>;
}

/// Every credential stands: for embedders and tests without API keys.
pub struct AlwaysStanding;

#[async_trait::async_trait]
impl Standing for AlwaysStanding {
    async fn lapsed(&self, _: &AuthContext) -> Option<String> {
        None
    }
}

/// Whether `name` is a valid tenant name: 1–63 lowercase letters, digits and dashes,
/// starting with a letter or digit. Safe as a directory name and in URLs.
pub fn is_valid_tenant_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    (1..=63).contains(&bytes.len())
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-')
}

impl AuthContext {
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }

    /// Whom an audit row in `tenant`'s chain names for something `by` did (`None`: the
    /// gateway itself), when that need not be `by`'s own tenant: an operator's change to a
    /// tenant, or to every tenant. It grants nothing.
    pub fn recording_in(
        tenant: TenantId,
        by: Option<&std::sync::Arc<AuthContext>>,
    ) -> std::sync::Arc<AuthContext> {
        match by {
            Some(by) if by.tenant == tenant => by.clone(),
            by => std::sync::Arc::new(AuthContext {
                tenant,
                tenant_name: String::new(),
                principal: by.map_or_else(
                    || Principal {
                        id: PrincipalId(uuid::Uuid::nil()),
                        kind: PrincipalKind::ServiceAccount,
                        name: "toolgate".into(),
                    },
                    |by| by.principal.clone(),
                ),
                roles: Vec::new(),
                scopes: Vec::new(),
                key: None,
            }),
        }
    }
}

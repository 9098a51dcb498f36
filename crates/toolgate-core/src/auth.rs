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

/// The caller of one request: tenant, principal, roles and scopes.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthContext {
    pub tenant: TenantId,
    pub principal: Principal,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
}

impl AuthContext {
    pub fn has_scope(&self, scope: &str) -> bool {
        self.scopes.iter().any(|s| s == scope)
    }
}

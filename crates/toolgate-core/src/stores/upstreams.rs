//! Tenants' upstreams and pinned tool definitions: the records, [`UpstreamStore`] and
//! [`PinStore`].

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::Backend;
use crate::{PrincipalId, TenantId};

/// One tenant upstream as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct UpstreamRecord {
    pub id: Uuid,
    pub tenant: TenantId,
    pub name: String,
    /// Everything but the credentials.
    pub config: serde_json::Value,
    /// Sealed by the gateway; the store never sees them in the clear.
    pub credentials: Option<Vec<u8>>,
    /// 1 at creation, one more at each change.
    pub revision: i64,
    pub created_by: Option<PrincipalId>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

/// Tenants' upstreams as the supervisors on every instance read them, and principals'
/// own credentials for them. Sealed values are opaque bytes here: the store never sees
/// a credential in the clear.
#[async_trait]
pub trait UpstreamStore: Backend {
    /// Every upstream's id and revision, across tenants (for the gateway's supervisors,
    /// never for a tenant's request).
    async fn upstream_revisions(&self) -> Result<Vec<(Uuid, i64)>, Self::Error>;

    /// One upstream by id, across tenants.
    async fn upstream_by_id(&self, id: Uuid) -> Result<Option<UpstreamRecord>, Self::Error>;

    /// Stores `principal`'s own (sealed) credential for `upstream`; replaces any before.
    async fn put_personal_credential(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        principal: PrincipalId,
        sealed: &[u8],
    ) -> Result<(), Self::Error>;

    /// `principal`'s own (sealed) credential for `upstream`, if stored.
    async fn personal_credential(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        principal: PrincipalId,
    ) -> Result<Option<Vec<u8>>, Self::Error>;

    /// Forgets `principal`'s own credential for `upstream`; whether there was one.
    async fn delete_personal_credential(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        principal: PrincipalId,
    ) -> Result<bool, Self::Error>;

    /// Every principal's own (sealed) credential, across tenants (for re-sealing them
    /// under a new key): tenant, upstream, principal and the sealed value.
    async fn personal_credentials(
        &self,
    ) -> Result<Vec<(TenantId, Uuid, PrincipalId, Vec<u8>)>, Self::Error>;

    /// Replaces a sealed value with `new` if it still is `old`: upstream `upstream`'s
    /// own credentials, or with `principal` that principal's own. Whether it was replaced.
    async fn replace_sealed(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        principal: Option<PrincipalId>,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, Self::Error>;
}

/// One tool's pinned definition, and a changed one waiting for a person.
#[derive(Clone, Debug, PartialEq)]
pub struct PinRecord {
    /// The tenant owning the upstream; the nil uuid for the operator's.
    pub owner: Uuid,
    pub upstream: String,
    /// The tool's name at the upstream.
    pub tool: String,
    /// Its name in the registry.
    pub exported: String,
    pub pinned_hash: Option<String>,
    pub pinned: Option<serde_json::Value>,
    pub pending_hash: Option<String>,
    pub pending: Option<serde_json::Value>,
    /// What the checks found in the pending (or, with none pending, the pinned)
    /// definition's description.
    pub findings: Vec<String>,
    pub updated_at: DateTime<Utc>,
    pub approved_by: Option<PrincipalId>,
    pub approved_at: Option<DateTime<Utc>>,
}

/// What a listing is compared with: one tool's pinned and waiting definitions' hashes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinHashes {
    /// The tool's name at the upstream.
    pub tool: String,
    pub pinned_hash: Option<String>,
    pub pending_hash: Option<String>,
}

/// Pinned upstream tool definitions (the rug-pull defence), keyed by owner (a tenant id,
/// or the nil uuid for the operator's upstreams), upstream and tool.
#[async_trait]
pub trait PinStore: Backend {
    /// The pin of `tool` of `upstream` owned by `owner`.
    async fn tool_pin(
        &self,
        owner: Uuid,
        upstream: &str,
        tool: &str,
    ) -> Result<Option<PinRecord>, Self::Error>;

    /// The hashes of every pin of `upstream` owned by `owner`: read once per listing.
    async fn pin_hashes(&self, owner: Uuid, upstream: &str) -> Result<Vec<PinHashes>, Self::Error>;

    /// Writes `pins` (each inserted, or replacing the one of its key), in transactions of
    /// a few hundred: a listing's new tools are pinned together, not a commit each.
    async fn save_tool_pins(&self, pins: &[PinRecord]) -> Result<(), Self::Error>;

    /// When a pending definition was last approved, by anyone: what other instances
    /// watch to list their upstreams again.
    async fn last_pin_approval(&self) -> Result<Option<DateTime<Utc>>, Self::Error>;

    /// Makes the pending definition hashing to `hash` the pin, approved by `by`; `None`
    /// when no such definition waits.
    async fn approve_tool_pin(
        &self,
        owner: Uuid,
        upstream: &str,
        tool: &str,
        hash: &str,
        by: PrincipalId,
    ) -> Result<Option<PinRecord>, Self::Error>;

    /// Every tenant: the chains in which a change to the operator's upstreams (whose
    /// tools every tenant is offered) is recorded.
    async fn tenant_ids(&self) -> Result<Vec<crate::TenantId>, Self::Error>;
}

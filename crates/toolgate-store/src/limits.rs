//! How long the store waits and how it shares its connections, and what each tenant may
//! keep ([`StoreLimits`], [`Quotas`]).

use std::time::Duration;

use crate::StoreError;

/// How long the store waits, so that a slow, locked or overloaded database turns into a
/// prompt 503 rather than requests that hang.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLimits {
    /// The longest one statement may run, or wait for a lock (Postgres
    /// `statement_timeout` and `lock_timeout`; SQLite's busy timeout).
    pub statement_timeout: Duration,
    /// The longest a request waits for a pooled connection (or for one of its tenant's
    /// places in the pool).
    pub acquire_timeout: Duration,
    /// How many of the pool's connections one tenant's operations may hold at once on
    /// this instance (see [`bulkhead`]).
    pub per_tenant: usize,
    /// The pool's size on this instance; `None`: the backend's own
    /// ([`POSTGRES_POOL`], [`SQLITE_POOL`]).
    pub max_connections: Option<u32>,
    /// How many of the pool's connections all tenants' operations together leave free for
    /// cross-tenant work (key lookups, sweeps, `/readyz`); `None`: a quarter of the pool.
    pub reserved: Option<usize>,
    /// How many objects one tenant may keep.
    pub quotas: Quotas,
}

/// How many objects one tenant may keep: past these, a creation is refused (409) and
/// nothing is written (a call that would wait for approval: 429). Counted in the
/// creation's own statement or transaction, so creations at the same moment on Postgres
/// may pass a quota by as many as run at once; SQLite's are exact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Quotas {
    pub agents: usize,
    pub principals: usize,
    /// Keys not revoked.
    pub keys: usize,
    /// Calls waiting for a person's approval, all of the tenant's principals together:
    /// past it, a call that needs approval is refused (429) instead of asking.
    pub pending_approvals: usize,
    /// …and one principal's.
    pub pending_approvals_per_principal: usize,
}

impl Quotas {
    /// `quota` as the statements bind it.
    pub(crate) fn bound(quota: usize) -> i64 {
        i64::try_from(quota).unwrap_or(i64::MAX)
    }
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            agents: 1_000,
            principals: 10_000,
            keys: 10_000,
            pending_approvals: 1_000,
            pending_approvals_per_principal: 100,
        }
    }
}

/// The refusal of a creation past a tenant's quota: `what` (plural), the setting, and
/// what the tenant can do about it.
pub(crate) fn over_quota(count: i64, what: &str, setting: &str, remedy: &str) -> StoreError {
    StoreError::Conflict(format!(
        "your tenant has {count} {what}, the most it may keep (limits.{setting}); {remedy}"
    ))
}

/// The Postgres pool's size on an instance, unless configured: Postgres allows ~100
/// connections by default, and this leaves room for several instances and ops sessions.
pub const POSTGRES_POOL: u32 = 16;
/// The SQLite pool's size unless configured (its writes take turns anyway).
pub const SQLITE_POOL: u32 = 8;

impl StoreLimits {
    /// The pool's size: the configured one, else the backend's `default`.
    pub fn pool(&self, default: u32) -> u32 {
        self.max_connections.unwrap_or(default).max(1)
    }

    /// How many of a pool of `pool` connections tenants' operations may hold together: all
    /// but the reserve, and at least one.
    pub fn for_tenants(&self, pool: u32) -> usize {
        let pool = pool as usize;
        let reserved = self.reserved.unwrap_or(pool / 4);
        pool.saturating_sub(reserved).max(1)
    }
}

impl Default for StoreLimits {
    fn default() -> Self {
        Self {
            statement_timeout: Duration::from_secs(5),
            acquire_timeout: Duration::from_secs(2),
            per_tenant: 4,
            max_connections: None,
            reserved: None,
            quotas: Quotas::default(),
        }
    }
}

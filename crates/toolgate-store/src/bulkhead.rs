//! One tenant's share of the store's pool.
//!
//! Every tenant's statements (its approvals, runs, sessions, audit reads) take a
//! connection from one pool per instance (16 on Postgres, 8 on SQLite). Without a bound,
//! one tenant's principal asking for audit summaries in 32 parallel requests held all of
//! them: every other tenant's approvals and reads, and `/readyz`, waited out the acquire
//! timeout and failed. Each tenant now holds at most
//! [`StoreLimits::per_tenant`](crate::StoreLimits) of them at once on this instance; its
//! next operation waits for one of its own to finish (at most the acquire timeout, then
//! 503 with `Retry-After`), never for another tenant's.
//!
//! Together, tenants hold at most the pool less [`StoreLimits::reserved`](crate::StoreLimits)
//! connections: without that, four tenants each at their share filled Postgres' sixteen
//! (two filled SQLite's eight), and key lookups, sweeps and `/readyz` failed again. Past
//! that, a tenant's operation waits for any tenant's place, within the same wait.
//!
//! Cross-tenant work (key lookups, sweeps, `/readyz`) does not go through it; the audit
//! writer has its own connection.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use toolgate_core::TenantId;

use crate::StoreError;

/// The places each tenant may hold in the pool.
#[derive(Debug)]
pub(crate) struct Bulkhead {
    per_tenant: usize,
    /// The places of all tenants together: the pool less its reserve.
    shared: Arc<Semaphore>,
    all_tenants: usize,
    /// Operations refused since start (a tenant's share or all tenants' places full).
    refused: std::sync::atomic::AtomicU64,
    /// How long an operation waits for one of its tenant's places.
    wait: Duration,
    tenants: Mutex<HashMap<TenantId, Arc<Semaphore>>>,
}

/// One place of a tenant's, held until this is dropped.
#[derive(Debug)]
pub(crate) struct Place {
    _own: OwnedSemaphorePermit,
    _shared: OwnedSemaphorePermit,
}

impl Bulkhead {
    /// The shares and the wait of `limits` for a pool of `pool` connections.
    pub(crate) fn new(limits: &crate::StoreLimits, pool: u32) -> Arc<Self> {
        let all_tenants = limits.for_tenants(pool);
        Arc::new(Self {
            per_tenant: limits.per_tenant.max(1),
            shared: Arc::new(Semaphore::new(all_tenants)),
            all_tenants,
            refused: Default::default(),
            wait: limits.acquire_timeout,
            tenants: Mutex::default(),
        })
    }

    /// Places tenants hold now, and operations refused since start.
    pub(crate) fn load(&self) -> (u64, u64) {
        let held = self
            .all_tenants
            .saturating_sub(self.shared.available_permits());
        (
            held as u64,
            self.refused.load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// One of `tenant`'s places, when one is free within the wait; else
    /// [`StoreError::Busy`] (503 with `Retry-After`). The tenant's own place is taken
    /// first, so that a tenant past its share queues behind itself, not in front of others.
    pub(crate) async fn enter(&self, tenant: TenantId) -> Result<Place, StoreError> {
        let places = self
            .tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(tenant)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
            .clone();
        // Taken at once when free: no timer for the usual case.
        if let (Ok(own), Ok(shared)) = (
            places.clone().try_acquire_owned(),
            self.shared.clone().try_acquire_owned(),
        ) {
            return Ok(Place {
                _own: own,
                _shared: shared,
            });
        }
        let waited = self.wait_for(places).await;
        if waited.is_err() {
            self.refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        waited
    }

    /// One of `places` and then one of all tenants', within the wait.
    async fn wait_for(&self, places: Arc<Semaphore>) -> Result<Place, StoreError> {
        let deadline = tokio::time::Instant::now() + self.wait;
        let own = until(deadline, places, || {
            format!(
                "your tenant has {} database operations running on this instance, the most it may hold at once",
                self.per_tenant
            )
        })
        .await?;
        let shared = until(deadline, self.shared.clone(), || {
            format!(
                "this instance's tenants have {} database operations running, the most they may hold at once (the rest of its connections are kept for sign-ins and health checks)",
                self.all_tenants
            )
        })
        .await?;
        Ok(Place {
            _own: own,
            _shared: shared,
        })
    }
}

/// A permit of `places` taken by `deadline`; else [`StoreError::Busy`] saying `why`.
async fn until(
    deadline: tokio::time::Instant,
    places: Arc<Semaphore>,
    why: impl FnOnce() -> String,
) -> Result<OwnedSemaphorePermit, StoreError> {
    match tokio::time::timeout_at(deadline, places.acquire_owned()).await {
        Ok(Ok(place)) => Ok(place),
        _ => Err(StoreError::Busy(why())),
    }
}

/// A transaction holding what it was given until it commits, rolls back or is dropped: a
/// tenant's place in the [`Bulkhead`], and on SQLite a writer's turn at the write lock
/// ([`crate::sqlite::Turn`]). Reaches the connection as the transaction does (`&mut *tx`).
pub(crate) struct Held<DB: sqlx::Database> {
    tx: sqlx::Transaction<'static, DB>,
    _place: Option<Place>,
    _turn: Option<crate::sqlite::Turn>,
}

impl<DB: sqlx::Database> Held<DB> {
    /// A tenant's transaction, in its `place`.
    pub(crate) fn new(tx: sqlx::Transaction<'static, DB>, place: Place) -> Self {
        Self {
            tx,
            _place: Some(place),
            _turn: None,
        }
    }

    /// A transaction across tenants, outside every tenant's share.
    pub(crate) fn across(tx: sqlx::Transaction<'static, DB>) -> Self {
        Self {
            tx,
            _place: None,
            _turn: None,
        }
    }

    /// The same, holding `turn` too.
    pub(crate) fn taking(mut self, turn: crate::sqlite::Turn) -> Self {
        self._turn = Some(turn);
        self
    }

    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        self.tx.commit().await
    }
}

impl<DB: sqlx::Database> Deref for Held<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        &self.tx
    }
}

impl<DB: sqlx::Database> DerefMut for Held<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        &mut self.tx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_tenant_waits_for_its_own_places_only() {
        let bulkhead = Bulkhead::new(
            &crate::StoreLimits {
                per_tenant: 2,
                acquire_timeout: Duration::from_millis(50),
                ..crate::StoreLimits::default()
            },
            16,
        );
        let (a, b) = (TenantId::new(), TenantId::new());
        let first = bulkhead.enter(a).await.expect("a first");
        let _second = bulkhead.enter(a).await.expect("a second");
        assert!(matches!(
            bulkhead.enter(a).await,
            Err(StoreError::Busy(m)) if m.contains("2 database operations")
        ));
        // Another tenant is not held to a's count.
        let _theirs = bulkhead.enter(b).await.expect("b");
        // A place given back is taken by the next waiting.
        let waiting = tokio::spawn(async move {
            let bulkhead = bulkhead;
            bulkhead.enter(a).await.map(drop)
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(first);
        assert!(waiting.await.expect("task").is_ok());
    }

    #[tokio::test]
    async fn tenants_together_leave_the_reserve_free() {
        // A pool of eight keeps a quarter, two, from tenants: three tenants at their share
        // of three hold six, and a fourth waits for one of theirs.
        let bulkhead = Bulkhead::new(
            &crate::StoreLimits {
                per_tenant: 3,
                acquire_timeout: Duration::from_millis(50),
                ..crate::StoreLimits::default()
            },
            8,
        );
        let mut held = Vec::new();
        for _ in 0..2 {
            let tenant = TenantId::new();
            for _ in 0..3 {
                held.push(bulkhead.enter(tenant).await.expect("within the share"));
            }
        }
        let last = TenantId::new();
        assert!(matches!(
            bulkhead.enter(last).await,
            Err(StoreError::Busy(m)) if m.contains("tenants have 6 database operations")
        ));
        assert_eq!(bulkhead.load(), (6, 1));
        // Its own place was given back: once another's is free, it gets one.
        held.pop();
        let _theirs = bulkhead.enter(last).await.expect("a freed place");
        // Configured: no reserve at all, or all but one.
        let limits = |reserved| crate::StoreLimits {
            reserved: Some(reserved),
            ..crate::StoreLimits::default()
        };
        assert_eq!(limits(0).for_tenants(8), 8);
        assert_eq!(limits(8).for_tenants(8), 1);
        assert_eq!(crate::StoreLimits::default().for_tenants(16), 12);
    }

    /// On a real store (SQLite here; Postgres in the e2e suite), every way a tenant's
    /// statements reach the pool takes one of its places.
    #[tokio::test]
    async fn a_store_operation_waits_for_its_tenants_place() {
        let dir = tempfile::tempdir().expect("dir");
        let limits = crate::StoreLimits {
            per_tenant: 1,
            acquire_timeout: Duration::from_millis(50),
            ..crate::StoreLimits::default()
        };
        let store = crate::SqliteStore::open(&dir.path().join("t.db"), limits)
            .await
            .expect("open");
        store.migrate().await.expect("migrate");
        let (a, b) = (TenantId::new(), TenantId::new());
        let reading = store.tenant_read(a).await.expect("a reads");
        assert!(matches!(
            store.list_approvals(a, None, None, 10).await,
            Err(StoreError::Busy(_))
        ));
        assert!(matches!(store.tenant_tx(a).await, Err(StoreError::Busy(_))));
        let everything = crate::AuditFilter::default();
        assert!(matches!(
            store.list_audit(a, &everything, 10).await,
            Err(StoreError::Busy(_))
        ));
        store
            .list_approvals(b, None, None, 10)
            .await
            .expect("b reads");
        reading.commit().await.expect("commit");
        store
            .list_approvals(a, None, None, 10)
            .await
            .expect("a reads again");
    }
}

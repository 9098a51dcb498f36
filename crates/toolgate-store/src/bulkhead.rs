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
//! Cross-tenant work (key lookups, sweeps, the audit writer) does not go through it.

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
    /// How long an operation waits for one of its tenant's places.
    wait: Duration,
    tenants: Mutex<HashMap<TenantId, Arc<Semaphore>>>,
}

/// One place of a tenant's, held until this is dropped.
pub(crate) type Place = OwnedSemaphorePermit;

impl Bulkhead {
    /// The share and the wait of `limits` (its `per_tenant` and `acquire_timeout`).
    pub(crate) fn new(limits: &crate::StoreLimits) -> Arc<Self> {
        Arc::new(Self {
            per_tenant: limits.per_tenant.max(1),
            wait: limits.acquire_timeout,
            tenants: Mutex::default(),
        })
    }

    /// One of `tenant`'s places, when one is free within the wait; else
    /// [`StoreError::Busy`] (503 with `Retry-After`).
    pub(crate) async fn enter(&self, tenant: TenantId) -> Result<Place, StoreError> {
        let places = self
            .tenants
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(tenant)
            .or_insert_with(|| Arc::new(Semaphore::new(self.per_tenant)))
            .clone();
        // Taken at once when free: no timer for the usual case.
        if let Ok(place) = places.clone().try_acquire_owned() {
            return Ok(place);
        }
        match tokio::time::timeout(self.wait, places.acquire_owned()).await {
            Ok(Ok(place)) => Ok(place),
            _ => Err(StoreError::Busy(format!(
                "your tenant has {} database operations running on this instance, the most it may hold at once",
                self.per_tenant
            ))),
        }
    }
}

/// A tenant's transaction, holding its place in the [`Bulkhead`] until it commits, rolls
/// back or is dropped. Reaches the connection as the transaction does (`&mut *tx`).
pub(crate) struct Held<DB: sqlx::Database> {
    tx: sqlx::Transaction<'static, DB>,
    _place: Place,
}

impl<DB: sqlx::Database> Held<DB> {
    pub(crate) fn new(tx: sqlx::Transaction<'static, DB>, place: Place) -> Self {
        Self { tx, _place: place }
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
        let bulkhead = Bulkhead::new(&crate::StoreLimits {
            per_tenant: 2,
            acquire_timeout: Duration::from_millis(50),
            ..crate::StoreLimits::default()
        });
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
            store.list_approvals(a, None, 10).await,
            Err(StoreError::Busy(_))
        ));
        assert!(matches!(store.tenant_tx(a).await, Err(StoreError::Busy(_))));
        let everything = crate::AuditFilter::default();
        assert!(matches!(
            store.list_audit(a, &everything, 10).await,
            Err(StoreError::Busy(_))
        ));
        store.list_approvals(b, None, 10).await.expect("b reads");
        reading.commit().await.expect("commit");
        store
            .list_approvals(a, None, 10)
            .await
            .expect("a reads again");
    }
}

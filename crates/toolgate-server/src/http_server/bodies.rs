//! The request body bytes a server holds at once, in all and per tenant.
//!
//! A body is read into memory whole (up to `http.max_body_bytes`) before its call is
//! admitted: the executor's rate and concurrency limits come after. Without a bound, one
//! valid key sending 1 MB bodies on 300 connections, slowly enough, had the gateway hold
//! 580 MB; on enough connections, every tenant's calls went down with the process. Now
//! each body's bytes are counted as they arrive, from the first, against the tenant its
//! credential names (see [`BodyCharge::bill`]), until its request is answered: past
//! `per_tenant` the request fails 429, past `max` in all 503, both with `Retry-After`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use toolgate_core::TenantId;

/// The request body bytes held at once: at most `max` in all, `per_tenant` of one
/// tenant's requests.
pub struct BodyBytes {
    max: u64,
    per_tenant: u64,
    held: AtomicU64,
    tenants: Mutex<HashMap<TenantId, u64>>,
    refused: AtomicU64,
}

/// A body refused for the bytes held already.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OverBudget {
    #[error(
        "your tenant's requests are sending as many body bytes at once as one tenant may (http.max_body_bytes_in_flight_per_tenant); try again shortly"
    )]
    Tenant,
    #[error(
        "the gateway is receiving as many request body bytes at once as it may hold (http.max_body_bytes_in_flight); try again shortly"
    )]
    Server,
}

impl BodyBytes {
    /// At most `max` bytes in all (at least one), `per_tenant` of one tenant's.
    pub fn new(max: u64, per_tenant: u64) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            per_tenant: per_tenant.max(1),
            held: AtomicU64::new(0),
            tenants: Mutex::default(),
            refused: AtomicU64::new(0),
        })
    }

    /// Bytes held now.
    pub fn held(&self) -> u64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Bodies refused so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    fn tenants(&self) -> std::sync::MutexGuard<'_, HashMap<TenantId, u64>> {
        self.tenants.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `n` more bytes for `tenant` (none: not known yet), or refuses them.
    fn take(&self, tenant: Option<TenantId>, n: u64) -> Result<(), OverBudget> {
        if self.held.fetch_add(n, Ordering::Relaxed) + n > self.max {
            self.held.fetch_sub(n, Ordering::Relaxed);
            self.refused.fetch_add(1, Ordering::Relaxed);
            return Err(OverBudget::Server);
        }
        if let Some(tenant) = tenant {
            let mut tenants = self.tenants();
            let held = tenants.entry(tenant).or_default();
            if *held + n > self.per_tenant {
                drop(tenants);
                self.held.fetch_sub(n, Ordering::Relaxed);
                self.refused.fetch_add(1, Ordering::Relaxed);
                return Err(OverBudget::Tenant);
            }
            *held += n;
        }
        Ok(())
    }

    /// Gives back `n` bytes of `tenant`'s (or of no tenant's).
    fn give_back(&self, tenant: Option<TenantId>, n: u64) {
        if let Some(tenant) = tenant {
            let mut tenants = self.tenants();
            if let Some(held) = tenants.get_mut(&tenant) {
                *held = held.saturating_sub(n);
                if *held == 0 {
                    tenants.remove(&tenant);
                }
            }
        }
        self.held.fetch_sub(n, Ordering::Relaxed);
    }
}

/// One request's body bytes, held until the request is answered (the call parsed from
/// them lives that long). In the request's extensions, so that signing in names its
/// tenant.
#[derive(Clone)]
pub(crate) struct BodyCharge(Arc<Charge>);

struct Charge {
    budget: Arc<BodyBytes>,
    tenant: OnceLock<TenantId>,
    held: AtomicU64,
}

impl BodyCharge {
    pub(super) fn new(budget: &Arc<BodyBytes>) -> Self {
        Self(Arc::new(Charge {
            budget: budget.clone(),
            tenant: OnceLock::new(),
            held: AtomicU64::new(0),
        }))
    }

    /// Names the tenant whose credential the request bears: its bytes count against that
    /// tenant's share from now on (those already held too).
    pub(crate) fn bill(&self, tenant: TenantId) {
        let charge = &self.0;
        if charge.tenant.set(tenant).is_ok() {
            let held = charge.held.load(Ordering::Relaxed);
            if held > 0 {
                *charge.budget.tenants().entry(tenant).or_default() += held;
            }
        }
    }

    /// Takes `n` more bytes of the body, or refuses them.
    pub(super) fn take(&self, n: usize) -> Result<(), OverBudget> {
        let charge = &self.0;
        let n = n as u64;
        if n == 0 {
            return Ok(());
        }
        charge.budget.take(charge.tenant.get().copied(), n)?;
        charge.held.fetch_add(n, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        let held = *self.held.get_mut();
        if held > 0 {
            self.budget.give_back(self.tenant.get().copied(), held);
        }
    }
}

/// The budget a body was refused for, if `err` (or what caused it) says so.
pub(crate) fn over_budget<'e>(
    err: &'e (dyn std::error::Error + 'static),
) -> Option<&'e OverBudget> {
    toolgate_core::error::cause::<OverBudget>(err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tenant_holds_its_share_and_no_more_and_gives_it_back_when_answered() {
        let budget = BodyBytes::new(100, 40);
        let (a, b) = (TenantId::new(), TenantId::new());
        let first = BodyCharge::new(&budget);
        first.bill(a);
        first.take(30).expect("within the share");
        let second = BodyCharge::new(&budget);
        second.bill(a);
        assert!(matches!(second.take(11), Err(OverBudget::Tenant)));
        second.take(10).expect("up to the share");
        let other = BodyCharge::new(&budget);
        other.bill(b);
        other.take(40).expect("another tenant's share is its own");
        assert_eq!(budget.held(), 80);
        let anonymous = BodyCharge::new(&budget);
        assert!(matches!(anonymous.take(21), Err(OverBudget::Server)));
        assert_eq!(budget.refused(), 2);
        drop((first, second));
        let again = BodyCharge::new(&budget);
        again.bill(a);
        again.take(40).expect("given back when answered");
        drop((again, other));
        assert_eq!(budget.held(), 0);
        assert!(budget.tenants().is_empty());
    }

    #[test]
    fn bytes_taken_before_the_tenant_is_known_count_against_it_once_billed() {
        let budget = BodyBytes::new(100, 40);
        let tenant = TenantId::new();
        let early = BodyCharge::new(&budget);
        early.take(30).expect("no tenant yet");
        early.bill(tenant);
        let later = BodyCharge::new(&budget);
        later.bill(tenant);
        assert!(matches!(later.take(20), Err(OverBudget::Tenant)));
        drop(early);
        assert!(budget.tenants().is_empty());
        assert_eq!(budget.held(), 0);
    }
}

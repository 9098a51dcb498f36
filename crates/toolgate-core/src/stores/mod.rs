//! The seams orchestration needs from durable storage, and the records that cross them.
//!
//! Core owns these traits; `toolgate-store` implements them over SQLite and Postgres, and
//! the crates that orchestrate (the agent crate's run supervisor) are written against
//! them, so none of them depends on a database. Each backend keeps its own error type
//! ([`Backend::Error`]): callers above pass it on unchanged (the REST edge turns a
//! store that cannot take the operation for now into 503).

use async_trait::async_trait;

use crate::{RunId, TenantId};

mod approvals;
mod runs;
mod sessions;
mod upstreams;

pub use approvals::{ApprovalRecord, ApprovalStatus, ApprovalStore, Decision};
pub use runs::{NewRun, RunEventRecord, RunFinish, RunRecord, RunStatus, RunStore, sees_every_run};
pub use sessions::{McpEvent, McpSession, SessionStore};
pub use upstreams::{PinHashes, PinRecord, PinStore, UpstreamRecord, UpstreamStore};

/// What every store seam shares: its error, and whether several gateway instances may
/// use the store at once.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    type Error: std::error::Error + Send + Sync + 'static;

    /// Whether several gateway instances may share this store (Postgres), as opposed to
    /// one process owning it (an SQLite file): on a shared store another instance may
    /// hold a lease that has not run out.
    fn is_shared(&self) -> bool;

    /// Whether `err` means the store could not take an operation for now (unreachable,
    /// out of connections, locked) rather than refused it: trying again shortly may
    /// succeed, and callers hear 503, not 500.
    fn is_transient(err: &Self::Error) -> bool;

    /// The [`Change`]s committed from now on, by this instance and every other sharing
    /// the store: what a wait listens to instead of reading the store on a timer.
    async fn watch_changes(&self) -> Result<Changes, Self::Error>;
}

/// A change another instance (or another stream on this one) may be waiting for,
/// announced by the store to every instance when its transaction commits: waits on it are
/// event-driven instead of reading the store on a timer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// One of the tenant's approvals was asked for, decided, used or expired.
    Approvals(TenantId),
    /// A run's journal grew.
    Run { tenant: TenantId, run: RunId },
    /// A person approved a tool's new definition (any owner's).
    PinApproved,
    /// Audit rows of the tenant were committed (announced in process only).
    Audit(TenantId),
    /// Announcements may have been missed (a receiver fell behind, the listening
    /// connection was remade): whoever waits reads the store again.
    Missed,
}

/// A waiter's [`Change`]s, as a store announces them.
pub struct Changes(tokio::sync::broadcast::Receiver<Change>);

impl Changes {
    pub fn new(receiver: tokio::sync::broadcast::Receiver<Change>) -> Self {
        Self(receiver)
    }

    /// Changes that never come: for a waiter whose store could not be watched, which
    /// then looks on its timer alone.
    pub fn silent() -> Self {
        Self(tokio::sync::broadcast::channel(1).0.subscribe())
    }

    /// The next change; [`Change::Missed`] for any this receiver fell behind on; `None`
    /// once the store is gone.
    pub async fn next(&mut self) -> Option<Change> {
        use tokio::sync::broadcast::error::RecvError;
        match self.0.recv().await {
            Ok(change) => Some(change),
            Err(RecvError::Lagged(_)) => Some(Change::Missed),
            Err(RecvError::Closed) => None,
        }
    }

    /// Returns once a change `concerns` the waiter (a missed announcement always does);
    /// never, once the store is gone, so waiters keep a timer too.
    pub async fn until(&mut self, concerns: impl Fn(Change) -> bool) {
        while let Some(change) = self.next().await {
            if change == Change::Missed || concerns(change) {
                return;
            }
        }
        std::future::pending().await
    }

    /// [`until`](Self::until) something changed in `tenant`'s approvals.
    pub async fn approvals_of(&mut self, tenant: TenantId) {
        self.until(|c| c == Change::Approvals(tenant)).await
    }

    /// [`until`](Self::until) `run`'s journal grew.
    pub async fn run(&mut self, tenant: TenantId, run: RunId) {
        self.until(|c| c == Change::Run { tenant, run }).await
    }
}

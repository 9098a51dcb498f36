//! The application state handed to every handler: small, explicit, cheap to clone.

use std::sync::Arc;

use axum::extract::FromRef;
use tokio_util::sync::CancellationToken;
use toolgate_core::{Executor, Registry};
use toolgate_store::Store;
use toolgate_tools::Workspaces;

use crate::auth::Authenticator;

/// Shared by every handler; one `Arc`, so the per-request clone is one increment.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

pub struct Shared {
    pub registry: Arc<Registry>,
    /// Upstreams' resources and prompts, served over MCP.
    pub catalog: Arc<toolgate_mcp::catalog::Catalog>,
    pub executor: Executor,
    pub authenticator: Arc<Authenticator>,
    pub workspaces: Arc<Workspaces>,
    pub store: Store,
    /// Agent runs driven by this instance, and their SSE wake-ups.
    pub runs: Arc<toolgate_agent::runs::Runs<toolgate_store::Store>>,
    /// Tenants' approval policies (cached) and approvals, as the executor sees them.
    pub approvals: Arc<toolgate_core::approvals::StoredApprovals<Store>>,
    /// People's decisions on approvals (the rules, the audit row, the event).
    pub decisions: Arc<toolgate_core::approvals::Decisions<Store>>,
    /// Where audit rows go (the executor's sink), for its backlog metric.
    pub audit: Arc<dyn toolgate_core::audit::AuditSink>,
    /// Tenants' own upstream MCP servers; `None` when `tenant_upstreams.enabled` is off.
    pub upstreams: Option<Arc<TenantUpstreams>>,
    /// Cancelled when the gateway begins to stop: long-lived streams (MCP SSE) end.
    pub shutdown: CancellationToken,
    /// Open SSE streams per principal and tenant, capped; each re-checks its credential.
    pub streams: Arc<crate::streams::Streams>,
    /// Rate and concurrency limits and load shedding, as the executor applies them.
    pub admission: Arc<toolgate_core::limits::Admission>,
    /// Metrics: the instruments and their Prometheus exposition.
    pub telemetry: Arc<crate::metrics::Telemetry>,
    /// The deployment's audit checkpoint key, when this host holds it, then the keys it
    /// replaced: `POST /v1/audit/verify` checks every checkpoint's signature against them.
    pub audit_keys: Vec<toolgate_store::checkpoint::VerifyingKey>,
    /// MCP sessions live in memory on this instance.
    pub mcp_sessions: Arc<std::sync::atomic::AtomicUsize>,
    /// Pinned upstream tool definitions.
    pub pins: Arc<toolgate_mcp::pins::Pins<toolgate_store::Store>>,
    /// Tenants whose audit log this instance is verifying now (one at a time each).
    pub verifying: std::sync::Mutex<toolgate_core::per_key::PerKey<toolgate_core::TenantId>>,
}

impl AppState {
    pub fn new(shared: Shared) -> Self {
        Self(Arc::new(shared))
    }

    /// The shared state itself (for holders that must not keep it alive: downgrade it).
    pub fn arc(&self) -> Arc<Shared> {
        self.0.clone()
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl FromRef<AppState> for Arc<Authenticator> {
    fn from_ref(state: &AppState) -> Self {
        state.authenticator.clone()
    }
}

/// Tenants' upstreams, supervised over this gateway's store.
pub type TenantUpstreams = toolgate_mcp::tenant_upstreams::TenantUpstreams<toolgate_store::Store>;

impl crate::metrics::Observed for Shared {
    fn audit_backlog(&self) -> u64 {
        self.audit.backlog() as u64
    }

    fn calls_in_flight(&self) -> u64 {
        self.admission.in_flight() as u64
    }

    fn instances(&self) -> u64 {
        u64::from(self.admission.instances())
    }

    fn sse_streams(&self) -> u64 {
        self.streams.open() as u64
    }

    fn mcp_sessions(&self) -> u64 {
        self.mcp_sessions.load(std::sync::atomic::Ordering::Relaxed) as u64
    }

    fn tenant_operations(&self) -> u64 {
        self.store.tenant_operations().0
    }

    fn tenant_operations_refused(&self) -> u64 {
        self.store.tenant_operations().1
    }

    fn write_turns(&self) -> toolgate_store::sqlite::WriteTurns {
        self.store.write_turns()
    }
}

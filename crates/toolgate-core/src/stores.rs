//! The seams orchestration needs from durable storage, and the records that cross them.
//!
//! Core owns these traits; `toolgate-store` implements them over SQLite and Postgres, and
//! the crates that orchestrate (the agent crate's run supervisor) are written against
//! them, so none of them depends on a database. Each backend keeps its own error type
//! ([`Backend::Error`]): callers above pass it on unchanged (the REST edge turns a
//! store that cannot take the operation for now into 503).

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::policy::{ApprovalRequest, Gate};
use crate::{ApprovalId, CallId, PrincipalId, RunId, TenantId};

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

/// A run's summary row.
#[derive(Clone, Debug, PartialEq)]
pub struct RunRecord {
    pub id: RunId,
    pub tenant: TenantId,
    pub agent_id: Uuid,
    pub agent_name: String,
    pub principal: PrincipalId,
    /// The caller's auth context, to resume the run as that caller.
    pub auth: crate::AuthContext,
    /// The agent's configuration when the run started.
    pub agent_config: serde_json::Value,
    pub input: String,
    pub status: RunStatus,
    pub output: Option<String>,
    pub best_effort: bool,
    pub error: Option<String>,
    /// Token counts over all the run's model calls, once it has ended or paused.
    pub usage: Option<crate::Usage>,
    pub cancel_requested: bool,
    pub created_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
}

/// Where a run stands; stored and shown as its snake-case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    /// Paused at a call that waits for a person's approval.
    AwaitingApproval,
    Completed,
    Failed,
    Cancelled,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::AwaitingApproval => "awaiting_approval",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Cancelled => "cancelled",
        }
    }

    pub fn parse(s: &str) -> Option<RunStatus> {
        Some(match s {
            "running" => RunStatus::Running,
            "awaiting_approval" => RunStatus::AwaitingApproval,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "cancelled" => RunStatus::Cancelled,
            _ => return None,
        })
    }

    /// Whether the run has ended for good (a paused run goes on later).
    pub fn is_terminal(self) -> bool {
        !matches!(self, RunStatus::Running | RunStatus::AwaitingApproval)
    }
}

/// Compares with a status's stored name (for readers holding names, such as tests).
impl PartialEq<&str> for RunStatus {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

/// A run to start, with its first event (`run_started`, sequence 1).
#[derive(Clone, Debug)]
pub struct NewRun {
    pub id: RunId,
    pub agent_id: Uuid,
    pub agent_name: String,
    pub principal: PrincipalId,
    pub auth: crate::AuthContext,
    pub agent_config: serde_json::Value,
    pub input: String,
    /// The instance that drives it and until when (renewed while it runs).
    pub owner: String,
    pub lease_until: DateTime<Utc>,
    pub first_event: serde_json::Value,
}

/// One event of a run's journal.
#[derive(Clone, Debug, PartialEq)]
pub struct RunEventRecord {
    pub seq: i64,
    pub kind: String,
    pub payload: serde_json::Value,
    pub created_at: DateTime<Utc>,
}

/// How a run ended: written to the run's row with its last event, and that event's
/// payload in the journal (`run_finished`), in this field order.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RunFinish {
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    #[serde(default)]
    pub best_effort: bool,
    pub usage: crate::Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Agent runs and their journals, with the leases that say which instance drives each.
#[async_trait]
pub trait RunStore: Backend {
    /// Records a new running run owned by `new.owner`, with its first event.
    async fn create_run(&self, tenant: TenantId, new: &NewRun) -> Result<(), Self::Error>;

    /// Appends `events` to `run`'s journal from `first_seq` on, in one transaction; with
    /// `finish`, also ends (or pauses) the run. `durable`: the commit must reach disk
    /// before this returns (someone waits on it).
    async fn append_run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        first_seq: i64,
        events: &[serde_json::Value],
        finish: Option<&RunFinish>,
        durable: bool,
    ) -> Result<(), Self::Error>;

    /// `run`'s journal after sequence `after`, in order.
    async fn run_events(
        &self,
        tenant: TenantId,
        run: RunId,
        after: i64,
    ) -> Result<Vec<RunEventRecord>, Self::Error>;

    /// Flags `run` for cancellation; false when it is not running or paused (or not the
    /// tenant's).
    async fn request_run_cancel(&self, tenant: TenantId, run: RunId) -> Result<bool, Self::Error>;

    /// Extends `owner`'s leases on `runs` to `until`; returns those of them flagged for
    /// cancellation.
    async fn renew_run_leases(
        &self,
        owner: &str,
        runs: &[RunId],
        until: DateTime<Utc>,
    ) -> Result<Vec<RunId>, Self::Error>;

    /// Takes over, for `owner` until `until`, at most `limit` runs that can go on: running
    /// ones whose lease ran out before `expired_before`, and paused ones that can go on (an
    /// approval decided or expired, or a cancel requested).
    async fn claim_orphaned_runs(
        &self,
        owner: &str,
        until: DateTime<Utc>,
        limit: i64,
        expired_before: DateTime<Utc>,
    ) -> Result<Vec<RunRecord>, Self::Error>;
}

/// One approval as stored.
#[derive(Clone, Debug, PartialEq)]
pub struct ApprovalRecord {
    pub id: ApprovalId,
    pub tenant: TenantId,
    pub call_id: CallId,
    pub tool: String,
    pub risk: crate::Risk,
    pub adapter: crate::Adapter,
    /// Secret fields masked.
    pub arguments: serde_json::Value,
    pub arguments_hash: String,
    /// As given; `None` once the call is settled.
    pub call_arguments: Option<serde_json::Value>,
    pub requester: PrincipalId,
    pub requester_name: String,
    pub auth: crate::AuthContext,
    pub run_id: Option<RunId>,
    pub step: Option<i64>,
    pub agent: Option<String>,
    pub status: ApprovalStatus,
    pub reason: Option<String>,
    pub decided_by: Option<PrincipalId>,
    pub decided_by_name: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    /// Until a decision: when it expires undecided. Once approved: when the approval
    /// lapses if the call it allows has not been made.
    pub expires_at: DateTime<Utc>,
    pub created_at: DateTime<Utc>,
    pub used_at: Option<DateTime<Utc>>,
    pub result: Option<serde_json::Value>,
}

impl ApprovalRecord {
    /// Pending and not yet past its time.
    pub fn is_open(&self, now: DateTime<Utc>) -> bool {
        self.status == ApprovalStatus::Pending && self.expires_at > now
    }

    /// The status a reader should see: a pending approval past its time, or an approved
    /// one whose call was not made in time (it lapsed), is expired even before the sweep
    /// marks it.
    pub fn effective_status(&self, now: DateTime<Utc>) -> ApprovalStatus {
        self.status
            .effective(self.used_at.is_some(), self.expires_at, now)
    }
}

impl ApprovalStatus {
    /// The status a reader should see at `now` of an approval stored with this one,
    /// `used` or not, expiring at `expires_at` (see [`ApprovalRecord::effective_status`]).
    pub fn effective(self, used: bool, expires_at: DateTime<Utc>, now: DateTime<Utc>) -> Self {
        let waiting = match self {
            ApprovalStatus::Pending => true,
            ApprovalStatus::Approved => !used,
            ApprovalStatus::Denied | ApprovalStatus::Expired => false,
        };
        if waiting && expires_at <= now {
            ApprovalStatus::Expired
        } else {
            self
        }
    }
}

/// Where an approval stands; stored and shown as its lower-case name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    Expired,
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }

    /// The status named `name`, as stored.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Pending, Self::Approved, Self::Denied, Self::Expired]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

impl std::fmt::Display for ApprovalStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Compares with a status's stored name (for readers holding names, such as tests).
impl PartialEq<&str> for ApprovalStatus {
    fn eq(&self, name: &&str) -> bool {
        self.as_str() == *name
    }
}

/// A person's decision.
#[derive(Clone, Debug)]
pub struct Decision {
    pub approve: bool,
    pub by: PrincipalId,
    pub by_name: String,
    pub reason: String,
    /// An approval lapses when the call it allows is not made within this time of the
    /// decision (the tenant's approval time): nobody's yes stays good for ever, and the
    /// call's unmasked arguments are not kept for a call never made.
    pub use_within: std::time::Duration,
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

/// Approval policies and approvals: calls gated atomically, decisions stored once, and
/// expiry (of those nobody decided in time, of approved ones whose call was not made in
/// time, and of those a cancelled run no longer waits for).
#[async_trait]
pub trait ApprovalStore: Backend {
    /// The tenant's approval policy document, if it set one.
    async fn approval_policy(
        &self,
        tenant: TenantId,
    ) -> Result<Option<serde_json::Value>, Self::Error>;

    /// Settles a call that needs approval, in one transaction (see
    /// [`Approvals::gate`](crate::Approvals::gate)).
    async fn gate_approval(&self, request: &ApprovalRequest) -> Result<Gate, Self::Error>;

    async fn get_approval(
        &self,
        tenant: TenantId,
        approval: ApprovalId,
    ) -> Result<Option<ApprovalRecord>, Self::Error>;

    /// Stores a person's decision on a pending approval; a conflict when it is decided
    /// or expired already.
    async fn decide_approval(
        &self,
        tenant: TenantId,
        approval: ApprovalId,
        decision: &Decision,
    ) -> Result<ApprovalRecord, Self::Error>;

    /// Keeps the outcome of the call an approval allowed (a REST call run on approval).
    async fn set_approval_result(
        &self,
        tenant: TenantId,
        approval: ApprovalId,
        result: &serde_json::Value,
    ) -> Result<(), Self::Error>;

    /// Marks approvals past their time expired: pending ones nobody decided, approved
    /// ones whose call was not made (lapsed); returns them.
    async fn expire_approvals(&self) -> Result<Vec<(TenantId, ApprovalId)>, Self::Error>;

    /// Keeps `result` as the outcome of every approved REST call, in every tenant, that
    /// started before `started_before` and has none: the instance making it stopped
    /// before keeping one. Returns them.
    async fn interrupt_approved_calls(
        &self,
        started_before: DateTime<Utc>,
        result: &serde_json::Value,
    ) -> Result<Vec<(TenantId, ApprovalId)>, Self::Error>;

    /// Expires what `run` still waits for or has yet to use, with `reason`; returns those
    /// approvals.
    async fn expire_run_approvals(
        &self,
        tenant: TenantId,
        run: RunId,
        reason: &str,
    ) -> Result<Vec<ApprovalId>, Self::Error>;
}

/// An MCP session: who opened it, the client's `initialize` parameters (JSON) and the
/// state a restored session must get back: the level it chose with `logging/setLevel`
/// (`None` until it chooses).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpSession {
    pub id: String,
    pub tenant: TenantId,
    pub principal: PrincipalId,
    pub initialize_params: String,
    pub log_level: Option<String>,
}

/// One SSE event of an MCP session's stream, kept for `Last-Event-ID` resumption.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct McpEvent {
    /// Position in the store's one sequence: the event id sent to the client.
    pub seq: i64,
    /// The JSON-RPC message; `None` for a priming (retry-only) event.
    pub message: Option<String>,
    pub retry_ms: Option<i32>,
}

/// MCP sessions and their stored SSE events, so that any instance can take a session
/// over and a client can resume a broken stream wherever it reconnects.
#[async_trait]
pub trait SessionStore: Backend {
    /// Records a session; a conflict if the id is taken.
    async fn put_mcp_session(&self, session: &McpSession) -> Result<(), Self::Error>;

    /// The session with this id, whichever tenant it belongs to: the caller is then
    /// checked against its owner.
    async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, Self::Error>;

    /// Records the level this tenant's session `id` chose with `logging/setLevel`;
    /// `false` when the tenant has no such session.
    async fn set_mcp_session_log_level(
        &self,
        tenant: TenantId,
        id: &str,
        level: &str,
    ) -> Result<bool, Self::Error>;

    /// Ends a session: its row and its stored SSE events.
    async fn delete_mcp_session(&self, tenant: TenantId, id: &str) -> Result<(), Self::Error>;

    /// Marks sessions `ids` as in use at `at` (an instance holding them in memory).
    async fn touch_mcp_sessions(
        &self,
        ids: &[String],
        at: DateTime<Utc>,
    ) -> Result<(), Self::Error>;

    /// Ends the sessions last seen in use before `before`, across tenants, with their
    /// stored events (retention: a client coming back gets 404 and opens a new one).
    /// Returns how many went.
    async fn prune_mcp_sessions(&self, before: DateTime<Utc>) -> Result<u64, Self::Error>;

    /// Stores one SSE event of `stream` in `session`; returns its sequence number, unique
    /// across the store (and so across gateway instances).
    async fn append_mcp_event(
        &self,
        tenant: TenantId,
        session: &str,
        stream: &str,
        message: Option<&str>,
        retry_ms: Option<i32>,
    ) -> Result<i64, Self::Error>;

    /// The events after event `seq` on the same stream as it, in order, as many as one
    /// bounded read returns (at least one when there are any): ask again after the last
    /// for the rest. Empty when there are none, or `seq` is not an event of this
    /// tenant's `session`.
    async fn mcp_events_after(
        &self,
        tenant: TenantId,
        session: &str,
        seq: i64,
    ) -> Result<Vec<McpEvent>, Self::Error>;

    /// Drops stored SSE events older than `before`, across tenants (retention). Returns
    /// how many went.
    async fn prune_mcp_events(&self, before: DateTime<Utc>) -> Result<u64, Self::Error>;
}

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

    /// Writes `pin` (inserted, or replacing the one of its key).
    async fn save_tool_pin(&self, pin: &PinRecord) -> Result<(), Self::Error>;

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

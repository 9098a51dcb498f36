//! Domain types the store reads and writes.

use chrono::{DateTime, Utc};
use serde::Serialize;
pub use toolgate_core::stores::{
    McpEvent, McpSession, NewRun, RunEventRecord, RunFinish, RunRecord,
};
use toolgate_core::{PrincipalId, PrincipalKind, RunId, TenantId};
use uuid::Uuid;

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Tenant {
    pub id: TenantId,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Principal {
    pub id: PrincipalId,
    pub tenant: TenantId,
    pub kind: PrincipalKind,
    pub name: String,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
}

/// What to create.
#[derive(Clone, Debug)]
pub struct NewPrincipal {
    pub kind: PrincipalKind,
    pub name: String,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
}

/// An API key as listed: never its secret.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ApiKey {
    pub id: Uuid,
    pub tenant: TenantId,
    pub principal: PrincipalId,
    pub name: String,
    /// The key's first characters, to tell keys apart.
    pub prefix: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// What to create.
#[derive(Clone, Debug)]
pub struct NewApiKey {
    pub principal: PrincipalId,
    pub name: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
}

/// A key that matched a presented secret, with its principal.
#[derive(Clone, Debug)]
pub struct KeyMatch {
    pub key: ApiKey,
    pub principal: Principal,
    pub tenant_name: String,
}

/// One audit row as stored.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AuditRow {
    pub call_id: Uuid,
    pub tenant: TenantId,
    pub seq: i64,
    pub principal: PrincipalId,
    pub adapter: String,
    pub tool: String,
    /// Canonical JSON text of the (masked) arguments.
    pub arguments: String,
    pub arguments_hash: String,
    pub outcome: String,
    pub error: Option<String>,
    pub duration_us: i64,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
    pub run_id: Option<RunId>,
    pub step: Option<i32>,
    pub client: Option<String>,
    /// The approval the call asked for, used, or was refused by (or, for a row of
    /// adapter `approval`, the one decided).
    pub approval_id: Option<Uuid>,
    /// For a call of a cached tool, what the cache did: `hit`, `miss` or `bypass`.
    pub cache: Option<String>,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub prev_hash: String,
    pub row_hash: String,
}

/// The most text (arguments, results, inputs, error messages) one read of audit rows,
/// approvals or runs holds: a read stops at the row that reaches it (after at least one row) and
/// says there is more. Such rows are as long as a call's arguments (up to
/// `http.max_body_bytes` each, kept even for refused calls): bounded by count alone, one
/// page of 1,000 audit rows of 1 MB held 3 GB of the gateway's memory while it was
/// answered.
pub const READ_BYTES: usize = 4 << 20;

/// Which of a tenant's runs a list holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RunFilter {
    /// Only runs this principal started.
    pub principal: Option<PrincipalId>,
    /// Only runs in this status.
    pub status: Option<toolgate_core::stores::RunStatus>,
}

/// Where a list newest first goes on: the creation time and id of the previous page's
/// last item. The next page holds what is older, or as old with a smaller id (the lists'
/// order: creation time, then id, both descending).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Before {
    pub created_at: DateTime<Utc>,
    pub id: uuid::Uuid,
}

impl Before {
    /// Adds to `q` the condition of the rows after this one in a list newest first by
    /// creation time then `id_column` (a uuid, cast by `cast` from text).
    pub(crate) fn push_to<DB>(self, q: &mut sqlx::QueryBuilder<DB>, id_column: &str, cast: &str)
    where
        DB: sqlx::Database,
        for<'t> DateTime<Utc>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        for<'t> String: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    {
        q.push(" and created_at <= ")
            .push_bind(self.created_at)
            .push(" and (created_at < ")
            .push_bind(self.created_at)
            .push(format!(" or {id_column} < "))
            .push_bind(self.id.to_string())
            .push(cast)
            .push(")");
    }
}

impl From<&RunRecord> for Before {
    fn from(run: &RunRecord) -> Self {
        Self {
            created_at: run.created_at,
            id: run.id.0,
        }
    }
}

impl From<&toolgate_core::stores::ApprovalRecord> for Before {
    fn from(approval: &toolgate_core::stores::ApprovalRecord) -> Self {
        Self {
            created_at: approval.created_at,
            id: approval.id.0,
        }
    }
}

/// Rows as one bounded read returned them: audit rows, approvals, runs.
#[derive(Clone, Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// Whether more match (the read stopped at its limit or at [`READ_BYTES`]).
    pub more: bool,
}

impl<T> Default for Page<T> {
    fn default() -> Self {
        Self {
            items: Vec::new(),
            more: false,
        }
    }
}

impl<T> Page<T> {
    /// Where the next page starts, when there is one: after this page's last item.
    pub fn next(&self) -> Option<Before>
    where
        for<'a> &'a T: Into<Before>,
    {
        self.items.last().filter(|_| self.more).map(Into::into)
    }

    /// The same page with each item converted by `f`.
    pub fn map<U>(self, f: impl FnMut(T) -> U) -> Page<U> {
        Page {
            items: self.items.into_iter().map(f).collect(),
            more: self.more,
        }
    }

    /// The same page with each item converted by `f`, or `f`'s first error.
    pub fn try_map<U, E>(self, f: impl FnMut(T) -> Result<U, E>) -> Result<Page<U>, E> {
        Ok(Page {
            items: self.items.into_iter().map(f).collect::<Result<_, _>>()?,
            more: self.more,
        })
    }
}

/// Where one approval stands, without what it holds: what a stream compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApprovalState {
    pub id: toolgate_core::ApprovalId,
    pub status: toolgate_core::stores::ApprovalStatus,
    pub expires_at: DateTime<Utc>,
    pub used: bool,
}

impl ApprovalState {
    /// The status a reader sees at `now` (as [`toolgate_core::stores::ApprovalRecord::effective_status`]).
    pub fn effective_status(&self, now: DateTime<Utc>) -> toolgate_core::stores::ApprovalStatus {
        self.status.effective(self.used, self.expires_at, now)
    }
}

/// What a summary needs of one call: when it finished, whether it went well, how long
/// it took.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallTiming {
    pub finished_at: DateTime<Utc>,
    pub ok: bool,
    pub duration_us: i64,
}

/// Filters for listing audit rows; all optional, combined with AND.
#[derive(Clone, Debug, Default)]
pub struct AuditFilter {
    pub tool: Option<String>,
    pub principal: Option<PrincipalId>,
    pub adapter: Option<String>,
    pub outcome: Option<String>,
    pub run_id: Option<RunId>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// Only the row of this call.
    pub call_id: Option<Uuid>,
    /// Only calls in this W3C trace (32 lowercase hex digits).
    pub trace_id: Option<String>,
    /// Rows with `seq` below this (newest first paging).
    pub before_seq: Option<i64>,
    /// Rows with `seq` above this, oldest first (following the log as it grows).
    pub after_seq: Option<i64>,
}

/// Where a tenant's kept chain starts: the signed checkpoint its older rows were pruned
/// through (`toolgate audit prune`). The first kept row links to `row_hash`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditBase {
    /// The last pruned row; rows after it are kept.
    pub seq: i64,
    /// That row's hash, as its checkpoint recorded it.
    pub row_hash: String,
    /// When the base moved here.
    pub pruned_at: DateTime<Utc>,
}

/// What pruning did for one tenant (see [`crate::Store::prune_audit`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pruned {
    /// The tenant's base afterwards (`None`: nothing was ever pruned).
    pub base: Option<i64>,
    /// Whether the base moved now (`false`: no newer checkpoint was old enough).
    pub moved: bool,
    /// Rows deleted now (rows a stopped prune left below the base included).
    pub deleted: u64,
    /// Checkpoints deleted now: those below the base, but for earlier bases.
    pub checkpoints: u64,
    /// The chain did not verify, so nothing was pruned: the rows could be the evidence.
    pub refused: Option<ChainBreak>,
}

/// What [`crate::Store::prune_history`] deleted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrunedHistory {
    /// Finished runs, each with its event journal.
    pub runs: u64,
    /// Failed-authentication records.
    pub security_events: u64,
    /// Settled approvals no kept audit row names.
    pub approvals: u64,
}

/// Where a tenant's chain first fails verification.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainBreak {
    /// The row's stored hash is not the hash of its contents.
    Altered { seq: i64, call_id: Uuid },
    /// The row does not point at its predecessor's hash.
    Relinked { seq: i64, call_id: Uuid },
    /// Sequence numbers skip (a row was removed).
    Gap { expected: i64, found: i64 },
    /// The chain ends before a row the store recorded: the chain head or a checkpoint
    /// names row `recorded`, the last row there is `found` (its newest rows were removed).
    Truncated { recorded: i64, found: i64 },
    /// A checkpoint names row `seq` with another hash than the row there has.
    Rewritten { seq: i64 },
    /// A checkpoint's signature is not the deployment key's.
    Forged { seq: i64 },
}

impl ChainBreak {
    /// A stable name for the kind of break (`altered`, `truncated`, …).
    pub fn kind(&self) -> &'static str {
        match self {
            ChainBreak::Altered { .. } => "altered",
            ChainBreak::Relinked { .. } => "relinked",
            ChainBreak::Gap { .. } => "gap",
            ChainBreak::Truncated { .. } => "truncated",
            ChainBreak::Rewritten { .. } => "rewritten",
            ChainBreak::Forged { .. } => "forged",
        }
    }

    /// The first row the break concerns.
    pub fn seq(&self) -> i64 {
        match *self {
            ChainBreak::Altered { seq, .. }
            | ChainBreak::Relinked { seq, .. }
            | ChainBreak::Rewritten { seq }
            | ChainBreak::Forged { seq } => seq,
            ChainBreak::Gap { expected, .. } => expected,
            ChainBreak::Truncated { recorded, .. } => recorded,
        }
    }
}

/// What a person is told: which row, and what was done to it.
impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ChainBreak::Altered { seq, call_id } => write!(
                f,
                "row {seq} (call {call_id}) was altered: its hash does not match its contents"
            ),
            ChainBreak::Relinked { seq, call_id } => {
                write!(
                    f,
                    "row {seq} (call {call_id}) does not link to the row before it"
                )
            }
            ChainBreak::Gap { expected, found } => {
                write!(f, "row {expected} is missing (the chain jumps to {found})")
            }
            ChainBreak::Truncated { recorded, found } => write!(
                f,
                "the chain ends at row {found}, but row {recorded} was recorded (by the chain head or a signed checkpoint): its newest rows were removed"
            ),
            ChainBreak::Rewritten { seq } => {
                write!(
                    f,
                    "row {seq} is not the row a signed checkpoint recorded there"
                )
            }
            ChainBreak::Forged { seq } => write!(
                f,
                "the checkpoint at row {seq} is not signed by this deployment's key, nor by one it replaced (audit.previous_public_keys)"
            ),
        }
    }
}

pub(crate) fn kind_str(kind: PrincipalKind) -> &'static str {
    match kind {
        PrincipalKind::User => "user",
        PrincipalKind::ServiceAccount => "service_account",
    }
}

pub(crate) fn parse_kind(kind: &str) -> PrincipalKind {
    match kind {
        "service_account" => PrincipalKind::ServiceAccount,
        _ => PrincipalKind::User,
    }
}

/// An agent as stored: its name and configuration (the agent crate's JSON).
#[derive(Clone, Debug, PartialEq)]
pub struct AgentRecord {
    pub id: Uuid,
    pub tenant: TenantId,
    pub name: String,
    pub config: serde_json::Value,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

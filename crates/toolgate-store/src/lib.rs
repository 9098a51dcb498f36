//! # toolgate-store
//!
//! Persistence behind one interface, [`Store`]: Postgres in production (selected by a
//! `postgres://` URL), an embedded SQLite file by default. Owns all SQL; `tenant_id` is a
//! parameter of every tenant-scoped query. Depends on `toolgate-core` only.
//!
//! Queries are runtime `query`/`query_as` with bound values, not the `query!` macros: the
//! macros check one database per crate, and this crate has two. The shared store suite
//! (`tests/store_suite/`) runs every behaviour against both backends and is the check.
//!
//! **One shape.** Each family of operations (tenancy, runs, approvals, sessions, pins,
//! upstreams, the audit log's reads) lives in one module, where one `macro_rules!` writes
//! it for both backends: ids and JSON travel as text and are cast on Postgres, a tenant's
//! statements run in a transaction naming the tenant on Postgres (row-level security)
//! and straight on the pool on SQLite (`sqlite_once` / `postgres_once`); on SQLite every
//! write of the process first waits its turn at the file's one write lock
//! (`sqlite::Turn`: `tenant_tx`, `cross_tx`, `$once!(…, write |conn| …)`, `turn()`; on
//! Postgres these take no turn). What differs
//! for a measured reason stays with its backend: the audit log's writes and a run
//! journal's append.
//!
//! # Layout
//!
//! - [`model`]: tenants, principals, API keys, audit rows.
//! - [`audit_log`]: the audit log's reads, call intents and security events;
//!   `audit_anchors`: its stored heads, signed checkpoints and bases.
//! - [`tenancy`]: tenants, principals and API keys, on both backends.
//! - [`keys`]: API key secrets (generated, hashed, recognised).
//! - [`chain`]: the per-tenant audit hash chain and canonical JSON.
//! - `integrity`: verifying a tenant's chain against its head, checkpoints and keys;
//!   signing checkpoints; retention (`Store::prune_audit`, `Store::prune_history`).
//! - [`writer`]: [`AuditWriter`], group commit of audit records (implements the core's
//!   `AuditSink`).
//! - [`runs`]: agents, runs and run journals.
//! - [`approvals`]: approval policies and approvals.
//! - [`upstreams`]: tenants' own upstream MCP servers.
//! - [`sessions`]: MCP sessions and their stored SSE events.
//! - `limits`: [`StoreLimits`], how long the store waits and how it shares its pool,
//!   and each tenant's [`Quotas`].
//! - `bulkhead`: each tenant's share of the pool (`StoreLimits::per_tenant`), and the
//!   reserve all tenants leave (`StoreLimits::reserved`).
//! - `batches`: deletes of many rows made as many short ones (retention, the MCP sweeps).
//! - [`sqlite`], [`postgres`]: the two backends: connecting, and the audit log's writes
//!   (`audit.rs`), which differ for a measured reason; [`audit_log`]'s reads and intents are shared.

/// Calls the same method on whichever backend the store is. Defined before the modules,
/// so that each module's `impl Store` forwards through it.
macro_rules! dispatch {
    ($self:ident, $s:ident => $call:expr) => {
        match $self {
            Store::Postgres($s) => $call,
            Store::Sqlite($s) => $call,
        }
    };
}

/// Runs one statement for a tenant on SQLite: straight on the pool, in autocommit (a
/// transaction would cost two more round trips to the connection's thread), the tenant
/// wall being the statement's own `tenant_id` filter, in one of the tenant's places in
/// the pool (see [`bulkhead`]). `$conn` is bound to the pool. A statement that writes
/// says `write`, and waits its turn at the write lock ([`sqlite::Turn`]).
macro_rules! sqlite_once {
    ($store:ident, $tenant:expr, |$conn:ident| $body:expr) => {{
        let _place = $store.bulkhead.enter($tenant).await?;
        let $conn = &$store.pool;
        $body
    }};
    ($store:ident, $tenant:expr, write |$conn:ident| $body:expr) => {{
        let _place = $store.bulkhead.enter($tenant).await?;
        let _turn = $store.turn().await?;
        let $conn = &$store.pool;
        $body
    }};
}

/// Runs one statement for a tenant on Postgres: in a transaction naming the tenant, so
/// row-level security applies. `$conn` is bound to the transaction's connection.
macro_rules! postgres_once {
    ($store:ident, $tenant:expr, |$conn:ident| $body:expr) => {{
        let mut tx = $store.tenant_tx($tenant).await?;
        let done = {
            let $conn = &mut *tx;
            $body
        };
        tx.commit().await?;
        done
    }};
    ($store:ident, $tenant:expr, write |$conn:ident| $body:expr) => {
        postgres_once!($store, $tenant, |$conn| $body)
    };
}

pub mod approvals;
mod audit_anchors;
pub mod audit_log;
mod batches;
mod bulkhead;
pub mod chain;
pub mod checkpoint;
pub mod instances;
mod integrity;
pub mod keys;
mod limits;
pub mod model;
mod nodelay;
pub mod notify;
pub mod pins;
#[cfg(test)]
mod plans;
pub mod postgres;
pub mod runs;
pub mod sessions;
pub mod sqlite;
pub mod tenancy;
mod text;
pub mod upstreams;
pub mod writer;

use std::path::Path;
use std::time::{Duration, SystemTime};

use chrono::{DateTime, Utc};
use toolgate_core::audit::AuditRecord;
use toolgate_core::{Adapter, CallId, ErrorKind, Outcome, PrincipalId, RunId, RunStep, TenantId};
use uuid::Uuid;

pub(crate) use limits::over_quota;
pub use limits::{POSTGRES_POOL, Quotas, SQLITE_POOL, StoreLimits};
pub use model::*;
pub use pins::{PinRecord, PinsAfter, PinsOnly};
pub use postgres::PostgresStore;
pub use sqlite::SqliteStore;
pub use upstreams::{UpstreamRecord, UpstreamWrite};
pub use writer::{AuditWriter, AuditWriterTask};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A uniqueness rule refused the write (e.g. a duplicate name).
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    /// The input breaks a rule of the data model (e.g. a malformed tenant name).
    #[error("{0}")]
    Invalid(String),
    #[error("database error: {0}")]
    Database(sqlx::Error),
    /// From the SQLite audit writer's own connection (see [`SqliteStore::append_audit`]).
    #[error("database error: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// Stored data that cannot be read back as written.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// The tenant, or all tenants together, hold all the places in the pool they may (see
    /// [`bulkhead`]): unavailable for now.
    #[error("{0}")]
    Busy(String),
}

impl From<sqlx::Error> for StoreError {
    /// A value Postgres cannot hold — a NUL in text (22021), the escape `\u0000` in
    /// `jsonb` (22P05) — is the input's fault, told as [`StoreError::Invalid`] (a client
    /// hears 400, not 500). The call paths store such values with the character replaced
    /// (`text::without_nul`, `text::jsonb_text`); this is for the rest (names, configs).
    fn from(err: sqlx::Error) -> Self {
        if let sqlx::Error::Database(db) = &err
            && matches!(db.code().as_deref(), Some("22021" | "22P05"))
        {
            return StoreError::Invalid(
                "text or JSON containing the character U+0000 (NUL) cannot be stored".into(),
            );
        }
        StoreError::Database(err)
    }
}

impl StoreError {
    /// Whether the database could not take the operation for now — unreachable, out of
    /// connections, timed out, locked, shutting down, out of space — rather than refused
    /// it: trying again later may succeed, and callers hear 503, not 500.
    pub fn is_unavailable(&self) -> bool {
        if let StoreError::Busy(_) = self {
            return true;
        }
        if let StoreError::Sqlite(err) = self {
            return match err {
                rusqlite::Error::SqliteFailure(failure, _) => matches!(
                    failure.code,
                    rusqlite::ErrorCode::DatabaseBusy
                        | rusqlite::ErrorCode::DatabaseLocked
                        | rusqlite::ErrorCode::DiskFull
                        | rusqlite::ErrorCode::SystemIoFailure
                        | rusqlite::ErrorCode::CannotOpen
                ),
                _ => false,
            };
        }
        let err = match self {
            StoreError::Database(err)
            | StoreError::Migrate(sqlx::migrate::MigrateError::Execute(err)) => err,
            _ => return false,
        };
        match err {
            sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Io(_)
            | sqlx::Error::Tls(_)
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => {
                let code = db.code().unwrap_or_default();
                if db.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some() {
                    // SQLITE_BUSY (5), SQLITE_LOCKED (6), SQLITE_FULL (13), and their
                    // extended codes (the primary code in the low byte).
                    return code
                        .parse::<i32>()
                        .is_ok_and(|c| matches!(c & 0xff, 5 | 6 | 13));
                }
                // Postgres: connection exceptions (08…), too many connections (53300),
                // disk full (53100), query cancelled by statement_timeout (57014), shutting
                // down (57P01-03), lock not available (55P03), the database not taking
                // connections for now (55000: `allow_connections false`, as during
                // maintenance), a read-only transaction (25006: a connection made to a
                // primary that has since failed over to standby).
                code.starts_with("08")
                    || matches!(
                        &*code,
                        "53300"
                            | "53100"
                            | "57014"
                            | "57P01"
                            | "57P02"
                            | "57P03"
                            | "55P03"
                            | "55000"
                            | "25006"
                    )
            }
            _ => false,
        }
    }

    /// Maps a violation of the named constraint to [`StoreError::Conflict`].
    pub(crate) fn on_constraint(err: sqlx::Error, constraint: &str, message: &str) -> StoreError {
        match &err {
            sqlx::Error::Database(db)
                if db.constraint() == Some(constraint) || db.message().contains(constraint) =>
            {
                StoreError::Conflict(message.to_owned())
            }
            // SQLite names the columns, not the constraint, of a violated unique index.
            sqlx::Error::Database(db) if db.is_unique_violation() => {
                StoreError::Conflict(message.to_owned())
            }
            _ => StoreError::from(err),
        }
    }
}

/// The store: one backend or the other.
#[derive(Clone, Debug)]
pub enum Store {
    Postgres(PostgresStore),
    Sqlite(SqliteStore),
}

impl Store {
    /// Tenants' database operations holding a connection on this instance now, and those
    /// refused since start because a tenant's share or all tenants' places were full.
    pub fn tenant_operations(&self) -> (u64, u64) {
        dispatch!(self, s => s.bulkhead.load())
    }

    /// How this process's writes to SQLite took their turns at its write lock (see
    /// [`sqlite::WriteTurns`]); zeros on Postgres.
    pub fn write_turns(&self) -> sqlite::WriteTurns {
        match self {
            Store::Postgres(_) => sqlite::WriteTurns::default(),
            Store::Sqlite(s) => s.write_turns(),
        }
    }

    /// Postgres when `database_url` is set, else SQLite at `<data_dir>/toolgate.db`.
    pub async fn open(database_url: Option<&str>, data_dir: &Path) -> Result<Store, StoreError> {
        Self::open_with(database_url, data_dir, StoreLimits::default()).await
    }

    /// [`Store::open`] with the given limits.
    pub async fn open_with(
        database_url: Option<&str>,
        data_dir: &Path,
        limits: StoreLimits,
    ) -> Result<Store, StoreError> {
        match database_url {
            Some(url) => Ok(Store::Postgres(PostgresStore::connect(url, limits).await?)),
            None => {
                std::fs::create_dir_all(data_dir).map_err(|e| {
                    StoreError::Corrupt(format!("cannot create {}: {e}", data_dir.display()))
                })?;
                Ok(Store::Sqlite(
                    SqliteStore::open(&data_dir.join("toolgate.db"), limits).await?,
                ))
            }
        }
    }

    /// Most audit records the writer puts in one transaction.
    pub fn max_batch(&self) -> usize {
        writer::MAX_BATCH
    }

    /// Whether a write (an audit row) could commit now; see each backend's
    /// `probe_write`.
    pub async fn probe_write(&self) -> Result<(), StoreError> {
        dispatch!(self, s => s.probe_write().await)
    }

    /// Whether several gateway instances may share this store (Postgres), or it has one
    /// (an SQLite file): what takes over a stopped instance's work, and where a session's
    /// events must be kept for a client that comes back through another instance.
    pub fn is_shared(&self) -> bool {
        matches!(self, Store::Postgres(_))
    }

    pub fn backend(&self) -> &'static str {
        match self {
            Store::Postgres(_) => "postgres",
            Store::Sqlite(_) => "sqlite",
        }
    }

    /// Why [`Store::backup_to`] copies no Postgres store, and what does.
    pub const POSTGRES_BACKUP: &'static str = "a Postgres store is backed up with Postgres's own tools (pg_dump, or a base backup with WAL archiving)";

    /// Writes a consistent copy of the embedded SQLite database to `to`, a file that must
    /// not exist yet, while the gateway may go on writing (SQLite's `VACUUM INTO`: one
    /// read transaction, so every committed audit row up to that moment and none half).
    /// Postgres is backed up with its own tools (`pg_dump`); [`StoreError::Invalid`] here.
    pub async fn backup_to(&self, to: &std::path::Path) -> Result<(), StoreError> {
        let Store::Sqlite(sqlite) = self else {
            return Err(StoreError::Invalid(Self::POSTGRES_BACKUP.into()));
        };
        if to.exists() {
            return Err(StoreError::Conflict(format!(
                "{} exists: a backup never overwrites a file",
                to.display()
            )));
        }
        let to = to
            .to_str()
            .ok_or_else(|| StoreError::Invalid(format!("{} is not UTF-8", to.display())))?;
        sqlx::query("vacuum into ?")
            .bind(to)
            .execute(&sqlite.pool)
            .await?;
        Ok(())
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        dispatch!(self, s => s.migrate().await)
    }

    /// The same store through new connection pools, for a task on another runtime.
    pub async fn reopen(&self) -> Result<Store, StoreError> {
        Ok(match self {
            Store::Postgres(s) => Store::Postgres(s.reopen()),
            Store::Sqlite(s) => Store::Sqlite(s.reopen().await?),
        })
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        dispatch!(self, s => s.ping().await)
    }

    /// Tells this process's waiters of `change`, committed elsewhere than in a store
    /// transaction that announces it (the audit writer's batches: a `NOTIFY` in every
    /// audit commit would serialize Postgres's commits on its notification queue).
    pub fn announce_local(&self, change: toolgate_core::stores::Change) {
        dispatch!(self, s => s.notifier.announce(change))
    }

    /// Whether anyone in this process watches the store's changes.
    pub fn watched(&self) -> bool {
        dispatch!(self, s => s.notifier.watched())
    }

    /// The changes committed from now on, by this instance and (on Postgres) every
    /// other: see [`notify`].
    pub async fn watch_changes(&self) -> Result<toolgate_core::stores::Changes, StoreError> {
        dispatch!(self, s => s.watch_changes().await)
    }

    /// On Postgres, a signal each time a key is revoked by any instance or the CLI (and
    /// when the listening connection was remade); `None` on SQLite, where
    /// [`revocation_marker`](Self::revocation_marker) is polled instead.
    pub async fn watch_revocations(
        &self,
    ) -> Result<Option<tokio::sync::mpsc::Receiver<()>>, StoreError> {
        match self {
            Store::Postgres(s) => Ok(Some(s.watch_revocations().await?)),
            Store::Sqlite(_) => Ok(None),
        }
    }

    /// On SQLite, a file beside the database that every revocation replaces (a new inode
    /// each time), by whichever process made it — the CLI included. A gateway that checks
    /// it before trusting a cached key sees a revocation the moment the revoking command
    /// returns, at the cost of one `stat`. `None` on Postgres, which announces
    /// revocations with `NOTIFY` ([`watch_revocations`](Self::watch_revocations)).
    pub fn revocation_signal(&self) -> Option<std::path::PathBuf> {
        match self {
            Store::Postgres(_) => None,
            Store::Sqlite(s) => Some(s.revocation_signal()),
        }
    }

    pub async fn record_call_intent(&self, record: &AuditRecord) -> Result<(), StoreError> {
        dispatch!(self, s => s.record_call_intent(record).await)
    }

    pub async fn append_audit(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        dispatch!(self, s => s.append_audit(records).await)
    }

    pub async fn unfinished_calls(&self) -> Result<Vec<AuditRecord>, StoreError> {
        dispatch!(self, s => s.unfinished_calls().await)
    }

    /// Records every call left unfinished by a stopped gateway as `interrupted`.
    pub async fn recover_unfinished(&self) -> Result<usize, StoreError> {
        let records = self.unfinished_calls().await?;
        if !records.is_empty() {
            self.append_audit(&records).await?;
        }
        Ok(records.len())
    }

    /// A page of `tenant`'s audit rows matching `filter`, newest first (oldest first after
    /// `after_seq`): at most `limit` rows and about [`READ_BYTES`] of their text,
    /// with whether more match.
    pub async fn list_audit(
        &self,
        tenant: TenantId,
        filter: &AuditFilter,
        limit: i64,
    ) -> Result<Page<AuditRow>, StoreError> {
        dispatch!(self, s => s.list_audit(tenant, filter, limit).await)
    }

    /// How `tenant`'s newest calls started since `since` went (at most `limit`, newest
    /// first): what a summary reads, without their arguments.
    pub async fn audit_timings(
        &self,
        tenant: TenantId,
        since: DateTime<Utc>,
        limit: i64,
    ) -> Result<Vec<CallTiming>, StoreError> {
        dispatch!(self, s => s.audit_timings(tenant, since, limit).await)
    }

    pub async fn record_security_event(
        &self,
        source: Option<&str>,
        route: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.record_security_event(source, route, reason).await)
    }
}

/// What [`read_bounded`] counts for a row's columns of fixed size.
const ROW_BYTES: usize = 512;

/// Reads `rows` (a query asking for `limit` + 1) one at a time into a page of at most
/// `limit`, stopping at the row that brings their size (`text`: the length of the columns
/// a caller decides, plus [`ROW_BYTES`]) to [`READ_BYTES`]; the row after the last kept
/// only says there is more.
pub(crate) async fn read_bounded<R>(
    mut rows: futures::stream::BoxStream<'_, Result<R, sqlx::Error>>,
    limit: i64,
    text: impl Fn(&R) -> usize,
) -> Result<Page<R>, sqlx::Error> {
    use futures::TryStreamExt;
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let (mut page, mut bytes) = (Page::default(), 0);
    while let Some(row) = rows.try_next().await? {
        if page.items.len() >= limit || bytes >= READ_BYTES {
            page.more = true;
            break;
        }
        bytes += text(&row) + ROW_BYTES;
        page.items.push(row);
    }
    Ok(page)
}

/// The time now, to the microsecond both backends keep: what is written is what a
/// read returns.
pub(crate) fn now() -> DateTime<Utc> {
    let t = Utc::now();
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

/// The columns of a call intent, as read back by a backend.
pub(crate) struct IntentFields {
    pub call_id: Uuid,
    pub tenant: Uuid,
    pub principal: Uuid,
    pub adapter: String,
    pub tool: String,
    pub arguments: String,
    pub arguments_hash: String,
    pub request_id: Option<String>,
    pub trace_id: Option<String>,
    pub run_id: Option<Uuid>,
    pub step: Option<i64>,
    pub client: Option<String>,
    pub started_at: DateTime<Utc>,
}

/// The audit record of a call whose gateway stopped before it finished.
pub(crate) fn interrupted(f: IntentFields) -> Result<AuditRecord, StoreError> {
    let adapter = match f.adapter.as_str() {
        "rest" => Adapter::Rest,
        "mcp" => Adapter::Mcp,
        "agent" => Adapter::Agent,
        other => return Err(StoreError::Corrupt(format!("unknown adapter {other:?}"))),
    };
    let started_at: SystemTime = f.started_at.into();
    let arguments =
        serde_json::from_str(&f.arguments).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    Ok(AuditRecord {
        call_id: CallId(f.call_id),
        tenant: TenantId(f.tenant),
        principal: PrincipalId(f.principal),
        adapter,
        tool: f.tool,
        arguments,
        arguments_hash: f.arguments_hash,
        // Recorded as cancelled: the call was cut off; the error text says how.
        outcome: Outcome::Error(ErrorKind::Cancelled),
        error: Some("interrupted: the gateway stopped before the call finished".into()),
        duration: Duration::ZERO,
        request_id: f.request_id,
        trace_id: f.trace_id,
        run: f.run_id.map(|r| RunStep {
            run_id: RunId(r),
            step: f.step.and_then(|s| u32::try_from(s).ok()).unwrap_or(0),
        }),
        client: f.client,
        approval: None,
        cache: None,
        started_at,
        finished_at: started_at,
    })
}

#[async_trait::async_trait]
impl toolgate_core::stores::Backend for Store {
    type Error = StoreError;

    fn is_shared(&self) -> bool {
        Store::is_shared(self)
    }

    fn is_transient(err: &StoreError) -> bool {
        err.is_unavailable()
    }

    async fn watch_changes(&self) -> Result<toolgate_core::stores::Changes, StoreError> {
        Store::watch_changes(self).await
    }
}

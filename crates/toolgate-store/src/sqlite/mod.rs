//! The embedded SQLite store: one file under the data directory, WAL mode, a busy
//! timeout, foreign keys on. SQLite has no row-level security; every query here filters
//! by tenant itself.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{Sqlite, SqlitePool};
use toolgate_core::TenantId;
use toolgate_core::audit::AuditRecord;
use toolgate_core::stores::Change;
use uuid::Uuid;

use crate::bulkhead::Held;
use crate::chain::{GENESIS, row_from_record};
use crate::{StoreError, now};

mod audit;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

#[derive(Clone, Debug)]
pub struct SqliteStore {
    pub(crate) pool: SqlitePool,
    path: std::path::PathBuf,
    /// The connection audit batches are written on (see [`SqliteStore::append_audit`]),
    /// held from one batch to the next.
    audit_conn: Arc<std::sync::Mutex<Option<rusqlite::Connection>>>,
    pub(crate) limits: crate::StoreLimits,
    /// Changes announced to this process's waiters (one instance per SQLite file).
    pub(crate) notifier: crate::notify::Notifier,
    /// Each tenant's share of the pool.
    pub(crate) bulkhead: Arc<crate::bulkhead::Bulkhead>,
}

impl SqliteStore {
    /// A transaction holding the write lock from its start (`BEGIN IMMEDIATE`): a
    /// deferred one that reads and then writes fails with `SQLITE_BUSY_SNAPSHOT` when
    /// another connection wrote in between, which waiting cannot cure. SQLite has one
    /// tenant wall (the queries' own `tenant_id` filters), so the tenant is not named to
    /// the database as on Postgres.
    /// It holds one of the tenant's places in the pool (see [`crate::bulkhead`]).
    pub(crate) async fn tenant_tx(&self, tenant: TenantId) -> Result<Held<Sqlite>, StoreError> {
        let place = self.bulkhead.enter(tenant).await?;
        Ok(Held::new(
            self.pool.begin_with("BEGIN IMMEDIATE").await?,
            place,
        ))
    }

    /// A transaction that only reads: deferred, so it takes no write lock and never
    /// queues behind the audit writer (in WAL mode readers do not wait for writers).
    /// Taking the write lock to read made a policy lookup under load wait in SQLite's
    /// busy handler, whose sleeps reach 100 ms each: requests stalled for up to seconds.
    pub(crate) async fn tenant_read(&self, tenant: TenantId) -> Result<Held<Sqlite>, StoreError> {
        let place = self.bulkhead.enter(tenant).await?;
        Ok(Held::new(self.pool.begin().await?, place))
    }
}

pub(crate) fn id(u: Uuid) -> String {
    u.hyphenated().to_string()
}

impl SqliteStore {
    /// Opens (creating if needed) the database file at `path`.
    pub async fn open(path: &Path, limits: crate::StoreLimits) -> Result<Self, StoreError> {
        let options = SqliteConnectOptions::from_str(&format!("sqlite://{}", path.display()))?
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            // WAL with NORMAL is durable across process crashes (only an OS crash can
            // lose the last transactions); FULL also syncs every commit to disk.
            .synchronous(SqliteSynchronous::Full)
            // A write waits this long for another's lock, then fails as unavailable (503).
            .busy_timeout(limits.statement_timeout)
            .foreign_keys(true);
        let size = limits.pool(crate::SQLITE_POOL);
        let pool = SqlitePoolOptions::new()
            .max_connections(size)
            .acquire_timeout(limits.acquire_timeout)
            .connect_with(options)
            .await?;
        Ok(Self {
            pool,
            path: path.to_path_buf(),
            audit_conn: Arc::default(),
            limits,
            notifier: crate::notify::Notifier::default(),
            bulkhead: crate::bulkhead::Bulkhead::new(&limits, size),
        })
    }

    /// The same file through a new pool, whose connections belong to the runtime that
    /// opens it (the audit writer's own thread).
    pub async fn reopen(&self) -> Result<Self, StoreError> {
        let mut reopened = Self::open(&self.path, self.limits).await?;
        reopened.notifier = self.notifier.clone();
        Ok(reopened)
    }

    /// Nothing inside the transaction: SQLite's waiters are told once it has committed
    /// ([`announced`](Self::announced)).
    pub(crate) async fn announce_in(
        &self,
        _tx: &mut sqlx::SqliteConnection,
        _change: Change,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// Tells this process's waiters of a committed change.
    pub(crate) fn announced(&self, change: Change) {
        self.notifier.announce(change);
    }

    /// The changes committed from now on.
    pub async fn watch_changes(&self) -> Result<toolgate_core::stores::Changes, StoreError> {
        Ok(self.notifier.watch())
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.pool).await?;
        Ok(())
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("select 1").execute(&self.pool).await?;
        Ok(())
    }

    /// Whether a write could be committed now: takes the write lock briefly (waiting at
    /// most 250 ms for it), then lets go.
    pub async fn probe_write(&self) -> Result<(), StoreError> {
        let mut conn = self.pool.acquire().await?;
        sqlx::query("pragma busy_timeout = 250")
            .execute(&mut *conn)
            .await?;
        let probed = async {
            sqlx::query("begin immediate").execute(&mut *conn).await?;
            sqlx::query("rollback").execute(&mut *conn).await?;
            Ok::<(), StoreError>(())
        }
        .await;
        let restored = sqlx::query(sqlx::AssertSqlSafe(format!(
            "pragma busy_timeout = {}",
            self.limits.statement_timeout.as_millis()
        )))
        .execute(&mut *conn)
        .await;
        if probed.is_err() || restored.is_err() {
            // Its state is unknown (a transaction left open, the short timeout kept).
            conn.detach();
        }
        probed
    }

    /// The file replaced after every revocation (see [`crate::Store::revocation_signal`]).
    pub fn revocation_signal(&self) -> std::path::PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push("-revoked");
        name.into()
    }

    /// Nothing inside the transaction: the signal file is replaced once it has
    /// committed ([`revocation_announced`](Self::revocation_announced)).
    pub(crate) async fn announce_revocation_in(
        &self,
        _tx: &mut sqlx::SqliteConnection,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// Replaces the signal file with a new one (a new inode: see
    /// [`crate::Store::revocation_signal`]). The revocation is already committed; if the file
    /// cannot be written, gateways still see it at their next poll.
    pub(crate) fn revocation_announced(&self) {
        let signal = self.revocation_signal();
        let mut temp = signal.clone().into_os_string();
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        temp.push(format!(".{}.{n}", std::process::id()));
        let written = std::fs::write(&temp, now().to_rfc3339())
            .and_then(|()| std::fs::rename(&temp, &signal));
        if let Err(err) = written {
            let _ = std::fs::remove_file(&temp);
            tracing::warn!(error = %err, path = %signal.display(), "could not signal a key revocation to running gateways; they notice it within a second");
        }
    }

    /// Raw access for tests and tooling that must go around the store (tamper tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

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
    /// The write lock's turns among this process's connections (see [`Turn`]).
    writes: Arc<tokio::sync::Mutex<()>>,
    /// How the turns went, for the metrics.
    turns: Arc<TurnCounts>,
}

/// Writers waiting for their turn now, turns taken, and the time spent waiting for them.
#[derive(Debug, Default)]
struct TurnCounts {
    waiting: std::sync::atomic::AtomicU64,
    taken: std::sync::atomic::AtomicU64,
    waited_nanos: std::sync::atomic::AtomicU64,
}

/// This process's writes to the SQLite file: how many wait for their [`Turn`] now, how
/// many turns were taken since start, and how long they waited in all (all 0 on
/// Postgres, which has no such lock).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct WriteTurns {
    pub waiting: u64,
    pub taken: u64,
    pub waited_secs: f64,
}

/// A turn at SQLite's write lock, held by a writer of this process from before it takes a
/// connection until its write ends. SQLite's lock is the whole file's, and a connection
/// finding it taken waits in SQLite's busy handler, polling with sleeps of up to 100 ms:
/// beside the audit writer, which commits batch after batch under load, a lone insert
/// waited up to half a second and a sweep's deletes a second each, the lock almost never
/// free at the instant of a poll. Turns are first come, first served (a Tokio mutex), so
/// a write waits for the ones ahead of it only. The busy handler still arbitrates with
/// other processes (`toolgate audit prune`, a backup). Taken before a connection, never
/// while holding one: a connection is then only ever held by the turn's holder or by a
/// read, and neither waits for a turn.
pub(crate) type Turn = tokio::sync::OwnedMutexGuard<()>;

/// The longest a readiness probe waits for the write lock.
const PROBE_WAIT: std::time::Duration = std::time::Duration::from_millis(250);

impl SqliteStore {
    /// A transaction holding the write lock from its start (`BEGIN IMMEDIATE`): a
    /// deferred one that reads and then writes fails with `SQLITE_BUSY_SNAPSHOT` when
    /// another connection wrote in between, which waiting cannot cure. SQLite has one
    /// tenant wall (the queries' own `tenant_id` filters), so the tenant is not named to
    /// the database as on Postgres.
    /// It holds one of the tenant's places in the pool (see [`crate::bulkhead`]) and the
    /// write lock's [`Turn`].
    pub(crate) async fn tenant_tx(&self, tenant: TenantId) -> Result<Held<Sqlite>, StoreError> {
        let place = self.bulkhead.enter(tenant).await?;
        let turn = self.turn().await?;
        Ok(Held::new(self.pool.begin_with("BEGIN IMMEDIATE").await?, place).taking(turn))
    }

    /// A transaction across tenants that writes: `BEGIN IMMEDIATE`, holding the write
    /// lock's [`Turn`].
    pub(crate) async fn cross_tx(&self) -> Result<Held<Sqlite>, StoreError> {
        let turn = self.turn().await?;
        Ok(Held::across(self.pool.begin_with("BEGIN IMMEDIATE").await?).taking(turn))
    }

    /// This process's next turn at the write lock, waited for as long as for a pooled
    /// connection (then [`StoreError::Busy`], a 503): a queue, as the pool's.
    pub(crate) async fn turn(&self) -> Result<Turn, StoreError> {
        self.turn_within(self.limits.acquire_timeout).await
    }

    async fn turn_within(&self, wait: std::time::Duration) -> Result<Turn, StoreError> {
        use std::sync::atomic::Ordering::Relaxed;
        let started = std::time::Instant::now();
        self.turns.waiting.fetch_add(1, Relaxed);
        let turn = tokio::time::timeout(wait, self.writes.clone().lock_owned()).await;
        self.turns.waiting.fetch_sub(1, Relaxed);
        let waited = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
        self.turns.waited_nanos.fetch_add(waited, Relaxed);
        if turn.is_ok() {
            self.turns.taken.fetch_add(1, Relaxed);
        }
        turn.map_err(|_| {
            StoreError::Busy(format!(
                "the database's write lock was not free within {} ms",
                wait.as_millis()
            ))
        })
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
            writes: Arc::default(),
            turns: Arc::default(),
        })
    }

    /// The same file through a new pool, whose connections belong to the runtime that
    /// opens it (the audit writer's own thread).
    pub async fn reopen(&self) -> Result<Self, StoreError> {
        let mut reopened = Self::open(&self.path, self.limits).await?;
        reopened.notifier = self.notifier.clone();
        reopened.writes = self.writes.clone();
        reopened.turns = self.turns.clone();
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
    /// most 250 ms for its turn, and as long for another process's), then lets go.
    pub async fn probe_write(&self) -> Result<(), StoreError> {
        let _turn = self.turn_within(PROBE_WAIT).await?;
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

    /// How this process's writes took their turns so far.
    pub fn write_turns(&self) -> WriteTurns {
        use std::sync::atomic::Ordering::Relaxed;
        WriteTurns {
            waiting: self.turns.waiting.load(Relaxed),
            taken: self.turns.taken.load(Relaxed),
            waited_secs: self.turns.waited_nanos.load(Relaxed) as f64 / 1e9,
        }
    }

    /// Raw access for tests and tooling that must go around the store (tamper tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

//! The Postgres store.
//!
//! Two pools on one URL. The *owner* pool runs migrations and the few operations that
//! span tenants by nature (creating and listing tenants, finding the key a bearer token
//! belongs to, recovering unfinished calls at start-up). The *app* pool switches every
//! connection to the role `toolgate_app` (no table ownership, no BYPASSRLS), and every
//! tenant-scoped query runs in a transaction that first names its tenant with
//! `set_config('toolgate.tenant_id', …, true)` — transaction-local, so a pooled
//! connection never carries one tenant into another's request. Row-level security is then
//! the second wall behind the `tenant_id` filter each query has anyway.
//!
//! No connection commits asynchronously: a server, database or role default of
//! `synchronous_commit = off` is overridden when a connection opens, since the audit's
//! promise is that an acknowledged call's row survives a crash.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Connection, Executor, PgConnection, PgPool, Postgres, Transaction};
use toolgate_core::TenantId;
use toolgate_core::audit::AuditRecord;
use toolgate_core::stores::Change;
use uuid::Uuid;

use crate::StoreError;
use crate::bulkhead::Held;
use crate::chain::{GENESIS, row_from_record};
use crate::model::*;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

mod audit;

/// The role the app pool works as (created by the migrations).
pub const APP_ROLE: &str = "toolgate_app";

#[derive(Clone, Debug)]
pub struct PostgresStore {
    pub(crate) owner: PgPool,
    pub(crate) app: PgPool,
    /// The chain head this process last wrote, per tenant: the expected position for the
    /// next append (checked by the database, so a stale entry costs a retry, not a fork).
    heads: Arc<Mutex<HashMap<TenantId, (i64, String)>>>,
    /// The connection audit batches are appended on, held from one batch to the next.
    /// Through the pool each batch paid two more round trips than its statement: sqlx
    /// pings a connection when it is acquired and again when it is released. Dropped
    /// after any failed append (its state is then unknown); see [`Self::append_audit`]
    /// for the one retry on a new connection.
    audit_conn: Arc<tokio::sync::Mutex<Option<PgConnection>>>,
    /// Kept to open the writer's own pools; boxed, it is large and rarely read.
    options: Box<PgConnectOptions>,
    pub(crate) limits: crate::StoreLimits,
    /// The relay this store's TCP connections go through (see [`crate::nodelay`]).
    _relay: Option<Arc<crate::nodelay::NoDelayRelay>>,
    /// Changes heard from every instance (`LISTEN`), for this process's waiters.
    pub(crate) notifier: crate::notify::Notifier,
    /// Each tenant's share of the app pool.
    pub(crate) bulkhead: Arc<crate::bulkhead::Bulkhead>,
}

impl PostgresStore {
    /// Pools on `url`; connections open on first use.
    pub async fn connect(url: &str, limits: crate::StoreLimits) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url.parse()?;
        Ok(Self::from_options(options, limits))
    }

    /// The same database through new pools, whose connections belong to the runtime
    /// that first uses them (the audit writer's own thread).
    pub fn reopen(&self) -> Self {
        Self {
            notifier: self.notifier.clone(),
            ..Self::from_options((*self.options).clone(), self.limits)
        }
    }

    /// Announces `change` to every instance when `tx` commits (`NOTIFY` is transactional).
    pub(crate) async fn announce_in(
        &self,
        tx: &mut PgConnection,
        change: Change,
    ) -> Result<(), StoreError> {
        sqlx::query("select pg_notify($1, $2)")
            .bind(crate::notify::CHANNEL)
            .bind(crate::notify::encode(change))
            .execute(tx)
            .await?;
        Ok(())
    }

    /// Nothing after the commit: this instance hears its own `NOTIFY` like the others.
    pub(crate) fn announced(&self, _change: Change) {}

    /// The changes committed by any instance from now on (listening starts on the first
    /// watch, on a connection of its own).
    pub async fn watch_changes(&self) -> Result<toolgate_core::stores::Changes, StoreError> {
        let changes = self.notifier.watch();
        self.notifier.listen_on(&self.owner).await?;
        Ok(changes)
    }

    /// Pools on `options`, through a [`NoDelayRelay`](crate::nodelay::NoDelayRelay) on
    /// the current runtime when they name a TCP server.
    fn from_options(options: PgConnectOptions, limits: crate::StoreLimits) -> Self {
        let tcp = options.get_socket().is_none() && !options.get_host().starts_with('/');
        let relay = tcp
            .then(|| crate::nodelay::NoDelayRelay::start(options.get_host(), options.get_port()))
            .and_then(|started| {
                started
                    .map_err(|err| tracing::warn!(error = %err, "cannot start the TCP_NODELAY relay; connecting to Postgres directly, where statements over 16 KiB may stall ~40 ms"))
                    .ok()
            })
            .map(Arc::new);
        let connect = match &relay {
            Some(relay) => options.clone().socket(relay.dir()),
            None => options.clone(),
        };
        // Beside the app's pool (`POSTGRES_POOL` unless configured), a small one for
        // migrations and the owner's work.
        let pool = limits.pool(crate::POSTGRES_POOL);
        let owner = PgPoolOptions::new()
            .max_connections(4)
            .acquire_timeout(limits.acquire_timeout)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    conn.execute(SYNCHRONOUS_COMMIT).await?;
                    Ok(())
                })
            })
            .connect_lazy_with(connect.clone());
        // The app's statements (never migrations) are bounded: a locked table or a slow
        // database fails the request as unavailable (503) instead of holding it.
        let timeout_ms = limits.statement_timeout.as_millis();
        let app = PgPoolOptions::new()
            .max_connections(pool)
            .acquire_timeout(limits.acquire_timeout)
            .after_connect(move |conn, _meta| {
                Box::pin(async move {
                    conn.execute(sqlx::AssertSqlSafe(format!(
                        "set role toolgate_app; set statement_timeout = {timeout_ms}; \
                         set lock_timeout = {timeout_ms}; {SYNCHRONOUS_COMMIT}"
                    )))
                    .await?;
                    Ok(())
                })
            })
            .connect_lazy_with(connect);
        Self {
            owner,
            app,
            heads: Arc::default(),
            audit_conn: Arc::default(),
            options: Box::new(options),
            limits,
            _relay: relay,
            notifier: crate::notify::Notifier::default(),
            bulkhead: crate::bulkhead::Bulkhead::new(&limits, pool),
        }
    }

    pub async fn migrate(&self) -> Result<(), StoreError> {
        MIGRATOR.run(&self.owner).await?;
        Ok(())
    }

    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("select 1").execute(&self.app).await?;
        Ok(())
    }

    /// Whether an audit row could be committed now: takes, without waiting, the lock an
    /// insert into `audit_log` takes (`select 1` succeeds while the table is locked).
    pub async fn probe_write(&self) -> Result<(), StoreError> {
        let mut tx = self.app.begin().await?;
        sqlx::query("lock table audit_log in row exclusive mode nowait")
            .execute(&mut *tx)
            .await?;
        tx.rollback().await?;
        Ok(())
    }

    /// A transaction on the app pool, scoped to `tenant` for row-level security; the
    /// tenant is named in the `BEGIN` round trip itself.
    /// It holds one of the tenant's places in the pool (see [`crate::bulkhead`]).
    pub(crate) async fn tenant_tx(&self, tenant: TenantId) -> Result<Held<Postgres>, StoreError> {
        let place = self.bulkhead.enter(tenant).await?;
        Ok(Held::new(
            self.app.begin_with(begin_for(tenant)).await?,
            place,
        ))
    }

    /// A transaction across tenants on the owner's pool.
    pub(crate) async fn cross_tx(&self) -> Result<Held<Postgres>, StoreError> {
        Ok(Held::across(self.owner.begin().await?))
    }

    /// Nothing to wait for: Postgres locks rows, not the database, and queues its
    /// waiters itself (SQLite's [`turn`](crate::sqlite::SqliteStore::turn)).
    pub(crate) async fn turn(&self) -> Result<(), StoreError> {
        Ok(())
    }

    /// A transaction that only reads; on Postgres the same as [`Self::tenant_tx`].
    pub(crate) async fn tenant_read(&self, tenant: TenantId) -> Result<Held<Postgres>, StoreError> {
        self.tenant_tx(tenant).await
    }

    /// `NOTIFY` inside the revoking transaction: delivered to every listening instance
    /// when, and only if, it commits.
    pub(crate) async fn announce_revocation_in(
        &self,
        tx: &mut PgConnection,
    ) -> Result<(), StoreError> {
        sqlx::query("select pg_notify($1, '')")
            .bind(REVOCATIONS_CHANNEL)
            .execute(tx)
            .await?;
        Ok(())
    }

    /// Nothing after the commit: the `NOTIFY` went with it.
    pub(crate) fn revocation_announced(&self) {}

    /// A signal each time a key is revoked anywhere (`NOTIFY`), and also whenever the
    /// listening connection was lost and made again (notifications may have been missed
    /// then). Ends when the receiver is dropped.
    pub async fn watch_revocations(&self) -> Result<tokio::sync::mpsc::Receiver<()>, StoreError> {
        let mut listener = sqlx::postgres::PgListener::connect_with(&self.owner).await?;
        listener.listen(REVOCATIONS_CHANNEL).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        tokio::spawn(async move {
            loop {
                // A notification, or `None`: the connection was lost and is made again on
                // the next call, so something may have been missed. Either way, signal.
                let received = tokio::select! {
                    _ = tx.closed() => return,
                    received = listener.try_recv() => received,
                };
                if let Err(err) = received {
                    tracing::warn!(error = %err, "listening for key revocations failed; retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
                let _ = tx.try_send(());
            }
        });
        Ok(rx)
    }

    /// The app-role pool, for tests that check what the gateway's role can and cannot do.
    pub fn app_pool(&self) -> &PgPool {
        &self.app
    }

    /// The owner pool, for tests and tooling that must go around the app role.
    pub fn owner_pool(&self) -> &PgPool {
        &self.owner
    }
}

/// An acknowledged call's audit row must survive a crash of the database server, so no
/// session of ours commits asynchronously: a server, database or role default of
/// `synchronous_commit = off` (which lost acknowledged rows) is overridden for the
/// session when it connects. Stronger settings (`remote_apply`…) are kept as they are.
const SYNCHRONOUS_COMMIT: &str = "select set_config('synchronous_commit', 'on', false) where current_setting('synchronous_commit') = 'off'";

/// `begin` that names the tenant in the same round trip. The id is formatted from a
/// `Uuid`, so it is hex digits and dashes only.
fn begin_for(tenant: TenantId) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(format!(
        "begin; select set_config('toolgate.tenant_id', '{}', true)",
        tenant.0.hyphenated()
    ))
}

/// The `NOTIFY` channel that announces key revocations to every instance.
const REVOCATIONS_CHANNEL: &str = "toolgate_key_revoked";

async fn set_tenant(
    tx: &mut Transaction<'_, Postgres>,
    tenant: TenantId,
) -> Result<(), StoreError> {
    sqlx::query("select set_config('toolgate.tenant_id', $1, true)")
        .bind(tenant.to_string())
        .execute(&mut **tx)
        .await?;
    Ok(())
}

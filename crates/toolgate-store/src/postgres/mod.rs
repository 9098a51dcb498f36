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
use sqlx::types::Json;
use sqlx::{Connection, Executor, PgConnection, PgPool, Postgres, QueryBuilder, Transaction};
use toolgate_core::audit::AuditRecord;
use toolgate_core::stores::Change;
use toolgate_core::{PrincipalId, RunId, TenantId};
use uuid::Uuid;

use crate::chain::{GENESIS, canonical_json, row_from_record};
use crate::checkpoint::Checkpoint;
use crate::model::*;
use crate::{StoreError, keys};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

mod audit;
mod runs;

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
    limits: crate::StoreLimits,
    /// The relay this store's TCP connections go through (see [`crate::nodelay`]).
    _relay: Option<Arc<crate::nodelay::NoDelayRelay>>,
    /// Changes heard from every instance (`LISTEN`), for this process's waiters.
    pub(crate) notifier: crate::notify::Notifier,
}

#[derive(sqlx::FromRow)]
struct PrincipalRow {
    principal_id: Uuid,
    tenant_id: Uuid,
    kind: String,
    name: String,
    roles: Json<Vec<String>>,
    scopes: Json<Vec<String>>,
    created_at: DateTime<Utc>,
}

impl From<PrincipalRow> for Principal {
    fn from(r: PrincipalRow) -> Self {
        Principal {
            id: PrincipalId(r.principal_id),
            tenant: TenantId(r.tenant_id),
            kind: parse_kind(&r.kind),
            name: r.name,
            roles: r.roles.0,
            scopes: r.scopes.0,
            created_at: r.created_at,
        }
    }
}

#[derive(sqlx::FromRow)]
struct KeyRow {
    api_key_id: Uuid,
    tenant_id: Uuid,
    principal_id: Uuid,
    name: String,
    prefix: String,
    scopes: Json<Vec<String>>,
    expires_at: Option<DateTime<Utc>>,
    last_used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}

impl From<KeyRow> for ApiKey {
    fn from(r: KeyRow) -> Self {
        ApiKey {
            id: r.api_key_id,
            tenant: TenantId(r.tenant_id),
            principal: PrincipalId(r.principal_id),
            name: r.name,
            prefix: r.prefix,
            scopes: r.scopes.0,
            expires_at: r.expires_at,
            last_used_at: r.last_used_at,
            revoked_at: r.revoked_at,
            created_at: r.created_at,
        }
    }
}

#[derive(sqlx::FromRow)]
struct KeyMatchRow {
    #[sqlx(flatten)]
    key: KeyRow,
    principal_kind: String,
    principal_name: String,
    principal_roles: Json<Vec<String>>,
    principal_scopes: Json<Vec<String>>,
    principal_created_at: DateTime<Utc>,
    tenant_name: String,
}

const FIND_KEY: &str = "select k.api_key_id, k.tenant_id, k.principal_id, k.name, k.prefix, k.scopes, k.expires_at, k.last_used_at, k.revoked_at, k.created_at,
        p.kind as principal_kind, p.name as principal_name, p.roles as principal_roles, p.scopes as principal_scopes,
        p.created_at as principal_created_at, t.name as tenant_name
 from api_key k
 join principal p on p.principal_id = k.principal_id and p.tenant_id = k.tenant_id
 join tenant t on t.tenant_id = k.tenant_id
 where k.secret_hash = $1";

const KEY_COLUMNS: &str = "api_key_id, tenant_id, principal_id, name, prefix, scopes, expires_at, last_used_at, revoked_at, created_at";
const PRINCIPAL_COLUMNS: &str = "principal_id, tenant_id, kind, name, roles, scopes, created_at";

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
        // Postgres allows ~100 connections by default; two pools per instance of 16 and 4
        // leave room for several gateway instances and ops sessions.
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
            .max_connections(16)
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
    pub(crate) async fn tenant_tx(
        &self,
        tenant: TenantId,
    ) -> Result<Transaction<'static, Postgres>, StoreError> {
        Ok(self.app.begin_with(begin_for(tenant)).await?)
    }

    /// A transaction that only reads; on Postgres the same as [`Self::tenant_tx`].
    pub(crate) async fn tenant_read(
        &self,
        tenant: TenantId,
    ) -> Result<Transaction<'static, Postgres>, StoreError> {
        self.tenant_tx(tenant).await
    }

    pub async fn create_tenant(&self, name: &str) -> Result<Tenant, StoreError> {
        let tenant = Tenant {
            id: TenantId::new(),
            name: name.to_owned(),
            created_at: now(),
        };
        sqlx::query("insert into tenant (tenant_id, name, created_at) values ($1, $2, $3)")
            .bind(tenant.id.0)
            .bind(&tenant.name)
            .bind(tenant.created_at)
            .execute(&self.owner)
            .await
            .map_err(|e| {
                StoreError::on_constraint(e, "tenant_name_key", "a tenant with this name exists")
            })?;
        Ok(tenant)
    }

    pub async fn list_tenants(&self) -> Result<Vec<Tenant>, StoreError> {
        let rows: Vec<(Uuid, String, DateTime<Utc>)> =
            sqlx::query_as("select tenant_id, name, created_at from tenant order by name")
                .fetch_all(&self.owner)
                .await?;
        Ok(rows
            .into_iter()
            .map(|(id, name, created_at)| Tenant {
                id: TenantId(id),
                name,
                created_at,
            })
            .collect())
    }

    pub async fn get_tenant(&self, tenant: TenantId) -> Result<Option<Tenant>, StoreError> {
        let row: Option<(Uuid, String, DateTime<Utc>)> =
            sqlx::query_as("select tenant_id, name, created_at from tenant where tenant_id = $1")
                .bind(tenant.0)
                .fetch_optional(&self.owner)
                .await?;
        Ok(row.map(|(id, name, created_at)| Tenant {
            id: TenantId(id),
            name,
            created_at,
        }))
    }

    pub async fn create_principal(
        &self,
        tenant: TenantId,
        new: &NewPrincipal,
    ) -> Result<Principal, StoreError> {
        let principal = Principal {
            id: PrincipalId::new(),
            tenant,
            kind: new.kind,
            name: new.name.clone(),
            roles: new.roles.clone(),
            scopes: new.scopes.clone(),
            created_at: now(),
        };
        let mut tx = self.tenant_tx(tenant).await?;
        sqlx::query(
            "insert into principal (principal_id, tenant_id, kind, name, roles, scopes, created_at) values ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(principal.id.0)
        .bind(tenant.0)
        .bind(kind_str(principal.kind))
        .bind(&principal.name)
        .bind(Json(&principal.roles))
        .bind(Json(&principal.scopes))
        .bind(principal.created_at)
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            StoreError::on_constraint(e, "principal_tenant_id_name_key", "a principal with this name exists in the tenant")
        })?;
        tx.commit().await?;
        Ok(principal)
    }

    pub async fn list_principals(&self, tenant: TenantId) -> Result<Vec<Principal>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<PrincipalRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select {PRINCIPAL_COLUMNS} from principal where tenant_id = $1 order by name"
        )))
        .bind(tenant.0)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows.into_iter().map(Principal::from).collect())
    }

    pub async fn get_principal(
        &self,
        tenant: TenantId,
        principal: PrincipalId,
    ) -> Result<Option<Principal>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let row: Option<PrincipalRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select {PRINCIPAL_COLUMNS} from principal where tenant_id = $1 and principal_id = $2"
        )))
        .bind(tenant.0)
        .bind(principal.0)
        .fetch_optional(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(row.map(Principal::from))
    }

    pub async fn create_api_key(
        &self,
        tenant: TenantId,
        new: &NewApiKey,
    ) -> Result<(ApiKey, String), StoreError> {
        let secret =
            keys::generate().map_err(|e| StoreError::Corrupt(format!("no randomness: {e}")))?;
        let key = ApiKey {
            id: Uuid::now_v7(),
            tenant,
            principal: new.principal,
            name: new.name.clone(),
            prefix: secret[..keys::SHOWN].to_owned(),
            scopes: new.scopes.clone(),
            expires_at: new.expires_at,
            last_used_at: None,
            revoked_at: None,
            created_at: now(),
        };
        let mut tx = self.tenant_tx(tenant).await?;
        let inserted = sqlx::query(
            "insert into api_key (api_key_id, tenant_id, principal_id, name, prefix, secret_hash, scopes, expires_at, created_at)
             select $1, $2, $3, $4, $5, $6, $7, $8, $9
             where exists (select 1 from principal where principal_id = $3 and tenant_id = $2)",
        )
        .bind(key.id)
        .bind(tenant.0)
        .bind(key.principal.0)
        .bind(&key.name)
        .bind(&key.prefix)
        .bind(keys::hash(&secret))
        .bind(Json(&key.scopes))
        .bind(key.expires_at)
        .bind(key.created_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::NotFound(
                "no such principal in this tenant".into(),
            ));
        }
        Ok((key, secret))
    }

    pub async fn list_api_keys(&self, tenant: TenantId) -> Result<Vec<ApiKey>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<KeyRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select {KEY_COLUMNS} from api_key where tenant_id = $1 order by created_at"
        )))
        .bind(tenant.0)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows.into_iter().map(ApiKey::from).collect())
    }

    pub async fn revoke_api_key(&self, tenant: TenantId, key: Uuid) -> Result<bool, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let done = sqlx::query(
            "update api_key set revoked_at = coalesce(revoked_at, $3) where tenant_id = $1 and api_key_id = $2",
        )
        .bind(tenant.0)
        .bind(key)
        .bind(now())
        .execute(&mut *tx)
        .await?;
        // Delivered to every listening instance when the revocation commits.
        sqlx::query("select pg_notify($1, '')")
            .bind(REVOCATIONS_CHANNEL)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(done.rows_affected() > 0)
    }

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

    /// One query: the key, its principal and its tenant's name.
    pub async fn find_key(&self, secret: &str) -> Result<Option<KeyMatch>, StoreError> {
        let row: Option<KeyMatchRow> = sqlx::query_as(FIND_KEY)
            .bind(keys::hash(secret))
            .fetch_optional(&self.owner)
            .await?;
        Ok(row.map(|r| {
            let key = ApiKey::from(r.key);
            let principal = Principal {
                id: key.principal,
                tenant: key.tenant,
                kind: parse_kind(&r.principal_kind),
                name: r.principal_name,
                roles: r.principal_roles.0,
                scopes: r.principal_scopes.0,
                created_at: r.principal_created_at,
            };
            KeyMatch {
                key,
                principal,
                tenant_name: r.tenant_name,
            }
        }))
    }

    pub async fn revocation_marker(&self) -> Result<(i64, Option<DateTime<Utc>>), StoreError> {
        Ok(sqlx::query_as(
            "select count(*), max(revoked_at) from api_key where revoked_at is not null",
        )
        .fetch_one(&self.owner)
        .await?)
    }

    pub async fn touch_key(&self, key: Uuid, at: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query("update api_key set last_used_at = $2 where api_key_id = $1")
            .bind(key)
            .bind(at)
            .execute(&self.owner)
            .await?;
        Ok(())
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

pub(crate) fn now() -> DateTime<Utc> {
    let t = Utc::now();
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

//! The embedded SQLite store: one file under the data directory, WAL mode, a busy
//! timeout, foreign keys on. SQLite has no row-level security; every query here filters
//! by tenant itself.

use std::collections::BTreeMap;
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::types::Json;
use sqlx::{QueryBuilder, Sqlite, SqlitePool};
use toolgate_core::audit::AuditRecord;
use toolgate_core::stores::Change;
use toolgate_core::{PrincipalId, RunId, TenantId};
use uuid::Uuid;

use crate::chain::{GENESIS, canonical_json, row_from_record};
use crate::checkpoint::Checkpoint;
use crate::model::*;
use crate::{StoreError, keys};

mod audit;
mod runs;

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

#[derive(Clone, Debug)]
pub struct SqliteStore {
    pub(crate) pool: SqlitePool,
    path: std::path::PathBuf,
    /// The connection audit batches are written on (see [`SqliteStore::append_audit`]),
    /// held from one batch to the next.
    audit_conn: Arc<std::sync::Mutex<Option<rusqlite::Connection>>>,
    limits: crate::StoreLimits,
    /// Changes announced to this process's waiters (one instance per SQLite file).
    pub(crate) notifier: crate::notify::Notifier,
}

impl SqliteStore {
    /// A transaction holding the write lock from its start (`BEGIN IMMEDIATE`): a
    /// deferred one that reads and then writes fails with `SQLITE_BUSY_SNAPSHOT` when
    /// another connection wrote in between, which waiting cannot cure. SQLite has one
    /// tenant wall (the queries' own `tenant_id` filters), so the tenant is not named to
    /// the database as on Postgres.
    pub(crate) async fn tenant_tx(
        &self,
        _tenant: TenantId,
    ) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin_with("BEGIN IMMEDIATE").await?)
    }

    /// A transaction that only reads: deferred, so it takes no write lock and never
    /// queues behind the audit writer (in WAL mode readers do not wait for writers).
    /// Taking the write lock to read made a policy lookup under load wait in SQLite's
    /// busy handler, whose sleeps reach 100 ms each: requests stalled for up to seconds.
    pub(crate) async fn tenant_read(
        &self,
        _tenant: TenantId,
    ) -> Result<sqlx::Transaction<'static, sqlx::Sqlite>, StoreError> {
        Ok(self.pool.begin().await?)
    }
}

pub(crate) fn id(u: Uuid) -> String {
    u.hyphenated().to_string()
}

pub(crate) fn uuid(s: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("bad uuid {s:?}: {e}")))
}

#[derive(sqlx::FromRow)]
struct TenantRow {
    tenant_id: String,
    name: String,
    created_at: DateTime<Utc>,
}

impl TenantRow {
    fn into_model(self) -> Result<Tenant, StoreError> {
        Ok(Tenant {
            id: TenantId(uuid(&self.tenant_id)?),
            name: self.name,
            created_at: self.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct PrincipalRow {
    principal_id: String,
    tenant_id: String,
    kind: String,
    name: String,
    roles: Json<Vec<String>>,
    scopes: Json<Vec<String>>,
    created_at: DateTime<Utc>,
}

impl PrincipalRow {
    fn into_model(self) -> Result<Principal, StoreError> {
        Ok(Principal {
            id: PrincipalId(uuid(&self.principal_id)?),
            tenant: TenantId(uuid(&self.tenant_id)?),
            kind: parse_kind(&self.kind),
            name: self.name,
            roles: self.roles.0,
            scopes: self.scopes.0,
            created_at: self.created_at,
        })
    }
}

#[derive(sqlx::FromRow)]
struct KeyRow {
    api_key_id: String,
    tenant_id: String,
    principal_id: String,
    name: String,
    prefix: String,
    scopes: Json<Vec<String>>,
    expires_at: Option<DateTime<Utc>>,
    last_used_at: Option<DateTime<Utc>>,
    revoked_at: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
}

impl KeyRow {
    fn into_model(self) -> Result<ApiKey, StoreError> {
        Ok(ApiKey {
            id: uuid(&self.api_key_id)?,
            tenant: TenantId(uuid(&self.tenant_id)?),
            principal: PrincipalId(uuid(&self.principal_id)?),
            name: self.name,
            prefix: self.prefix,
            scopes: self.scopes.0,
            expires_at: self.expires_at,
            last_used_at: self.last_used_at,
            revoked_at: self.revoked_at,
            created_at: self.created_at,
        })
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
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .acquire_timeout(limits.acquire_timeout)
            .connect_with(options)
            .await?;
        Ok(Self {
            pool,
            path: path.to_path_buf(),
            audit_conn: Arc::default(),
            limits,
            notifier: crate::notify::Notifier::default(),
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

    pub async fn create_tenant(&self, name: &str) -> Result<Tenant, StoreError> {
        let tenant = Tenant {
            id: TenantId::new(),
            name: name.to_owned(),
            created_at: now(),
        };
        sqlx::query("insert into tenant (tenant_id, name, created_at) values ($1, $2, $3)")
            .bind(id(tenant.id.0))
            .bind(&tenant.name)
            .bind(tenant.created_at)
            .execute(&self.pool)
            .await
            .map_err(|e| {
                StoreError::on_constraint(e, "tenant_name_key", "a tenant with this name exists")
            })?;
        Ok(tenant)
    }

    pub async fn list_tenants(&self) -> Result<Vec<Tenant>, StoreError> {
        let rows: Vec<TenantRow> =
            sqlx::query_as("select tenant_id, name, created_at from tenant order by name")
                .fetch_all(&self.pool)
                .await?;
        rows.into_iter().map(TenantRow::into_model).collect()
    }

    pub async fn get_tenant(&self, tenant: TenantId) -> Result<Option<Tenant>, StoreError> {
        let row: Option<TenantRow> =
            sqlx::query_as("select tenant_id, name, created_at from tenant where tenant_id = $1")
                .bind(id(tenant.0))
                .fetch_optional(&self.pool)
                .await?;
        row.map(TenantRow::into_model).transpose()
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
        sqlx::query(
            "insert into principal (principal_id, tenant_id, kind, name, roles, scopes, created_at) values ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(id(principal.id.0))
        .bind(id(tenant.0))
        .bind(kind_str(principal.kind))
        .bind(&principal.name)
        .bind(Json(&principal.roles))
        .bind(Json(&principal.scopes))
        .bind(principal.created_at)
        .execute(&self.pool)
        .await
        .map_err(|e| {
            StoreError::on_constraint(e, "principal_tenant_id_name_key", "a principal with this name exists in the tenant")
        })?;
        Ok(principal)
    }

    pub async fn list_principals(&self, tenant: TenantId) -> Result<Vec<Principal>, StoreError> {
        let rows: Vec<PrincipalRow> = sqlx::query_as(
            "select principal_id, tenant_id, kind, name, roles, scopes, created_at from principal where tenant_id = $1 order by name",
        )
        .bind(id(tenant.0))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(PrincipalRow::into_model).collect()
    }

    pub async fn get_principal(
        &self,
        tenant: TenantId,
        principal: PrincipalId,
    ) -> Result<Option<Principal>, StoreError> {
        let row: Option<PrincipalRow> = sqlx::query_as(
            "select principal_id, tenant_id, kind, name, roles, scopes, created_at from principal where tenant_id = $1 and principal_id = $2",
        )
        .bind(id(tenant.0))
        .bind(id(principal.0))
        .fetch_optional(&self.pool)
        .await?;
        row.map(PrincipalRow::into_model).transpose()
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
        let inserted = sqlx::query(
            "insert into api_key (api_key_id, tenant_id, principal_id, name, prefix, secret_hash, scopes, expires_at, created_at)
             select $1, $2, $3, $4, $5, $6, $7, $8, $9
             where exists (select 1 from principal where principal_id = $3 and tenant_id = $2)",
        )
        .bind(id(key.id))
        .bind(id(tenant.0))
        .bind(id(key.principal.0))
        .bind(&key.name)
        .bind(&key.prefix)
        .bind(keys::hash(&secret))
        .bind(Json(&key.scopes))
        .bind(key.expires_at)
        .bind(key.created_at)
        .execute(&self.pool)
        .await?;
        if inserted.rows_affected() == 0 {
            return Err(StoreError::NotFound(
                "no such principal in this tenant".into(),
            ));
        }
        Ok((key, secret))
    }

    pub async fn list_api_keys(&self, tenant: TenantId) -> Result<Vec<ApiKey>, StoreError> {
        let rows: Vec<KeyRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select {KEY_COLUMNS} from api_key where tenant_id = $1 order by created_at"
        )))
        .bind(id(tenant.0))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(KeyRow::into_model).collect()
    }

    pub async fn revoke_api_key(&self, tenant: TenantId, key: Uuid) -> Result<bool, StoreError> {
        let done = sqlx::query(
            "update api_key set revoked_at = coalesce(revoked_at, $3) where tenant_id = $1 and api_key_id = $2",
        )
        .bind(id(tenant.0))
        .bind(id(key))
        .bind(now())
        .execute(&self.pool)
        .await?;
        let revoked = done.rows_affected() > 0;
        if revoked {
            self.signal_revocation();
        }
        Ok(revoked)
    }

    /// The file replaced after every revocation (see [`Store::revocation_signal`]).
    pub fn revocation_signal(&self) -> std::path::PathBuf {
        let mut name = self.path.clone().into_os_string();
        name.push("-revoked");
        name.into()
    }

    /// Replaces the signal file with a new one (a new inode: see
    /// [`Store::revocation_signal`]). The revocation is already committed; if the file
    /// cannot be written, gateways still see it at their next poll.
    fn signal_revocation(&self) {
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

    /// One query: the key, its principal and its tenant's name. Revocation and expiry
    /// are checked by the caller, which knows the time.
    pub async fn find_key(&self, secret: &str) -> Result<Option<KeyMatch>, StoreError> {
        let row: Option<KeyMatchRow> = sqlx::query_as(FIND_KEY)
            .bind(keys::hash(secret))
            .fetch_optional(&self.pool)
            .await?;
        let Some(r) = row else { return Ok(None) };
        let key = r.key.into_model()?;
        let principal = Principal {
            id: key.principal,
            tenant: key.tenant,
            kind: parse_kind(&r.principal_kind),
            name: r.principal_name,
            roles: r.principal_roles.0,
            scopes: r.principal_scopes.0,
            created_at: r.principal_created_at,
        };
        Ok(Some(KeyMatch {
            key,
            principal,
            tenant_name: r.tenant_name,
        }))
    }

    pub async fn revocation_marker(&self) -> Result<(i64, Option<DateTime<Utc>>), StoreError> {
        Ok(sqlx::query_as(
            "select count(*), max(revoked_at) from api_key where revoked_at is not null",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    pub async fn touch_key(&self, key: Uuid, at: DateTime<Utc>) -> Result<(), StoreError> {
        sqlx::query("update api_key set last_used_at = $2 where api_key_id = $1")
            .bind(id(key))
            .bind(at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Raw access for tests and tooling that must go around the store (tamper tests).
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }
}

fn now() -> DateTime<Utc> {
    let t = Utc::now();
    DateTime::from_timestamp_micros(t.timestamp_micros()).unwrap_or(t)
}

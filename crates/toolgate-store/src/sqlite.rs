//! The embedded SQLite store: one file under the data directory, WAL mode, a busy
//! timeout, foreign keys on. SQLite has no row-level security; every query here filters
//! by tenant itself.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::types::Json;
use sqlx::{QueryBuilder, Sqlite, SqliteConnection, SqlitePool};
use toolgate_core::audit::AuditRecord;
use toolgate_core::{PrincipalId, RunId, TenantId};
use uuid::Uuid;

use crate::chain::{GENESIS, canonical_json, row_from_record};
use crate::checkpoint::Checkpoint;
use crate::model::*;
use crate::{StoreError, keys};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/sqlite");

#[derive(Clone, Debug)]
pub struct SqliteStore {
    pub(crate) pool: SqlitePool,
    path: std::path::PathBuf,
    /// The connection audit batches are written on, held from one batch to the next:
    /// through the pool each batch paid two more round trips to the connection's thread
    /// (sqlx pings a connection when it is acquired and when it is released). Dropped,
    /// with the chain heads it remembers, after a failed batch; the next one takes a new
    /// connection.
    audit_conn: Arc<tokio::sync::Mutex<Option<AuditConn>>>,
    limits: crate::StoreLimits,
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

/// The connection audit batches are written on, held from one batch to the next, with the
/// chain heads (`seq`, `row_hash`) its last commit left for each tenant it wrote.
#[derive(Debug)]
struct AuditConn {
    conn: SqliteConnection,
    heads: BTreeMap<TenantId, (i64, String)>,
}

/// One audit batch (see [`SqliteStore::append_audit`]): extending the heads `audit`
/// remembers, as one query, or, unless `from_memory`, in two: the write lock with the
/// heads as stored, then the rest. On success `audit` remembers the heads committed.
async fn append_batch(
    audit: &mut AuditConn,
    tenants: &BTreeSet<TenantId>,
    records: &[AuditRecord],
    from_memory: bool,
) -> Result<(), StoreError> {
    let mut heads: BTreeMap<TenantId, (i64, String)> = tenants
        .iter()
        .map(|t| (*t, (0, GENESIS.to_owned())))
        .collect();
    let begin = if from_memory {
        for (tenant, head) in &mut heads {
            // Always found (the caller checked); were it not, the genesis head's `seq`
            // would be taken and the batch retried from the stored heads.
            if let Some(known) = audit.heads.get(tenant) {
                head.clone_from(known);
            }
        }
        "begin immediate; "
    } else {
        // BEGIN IMMEDIATE: take the write lock first, so that no other connection
        // appends between this read of the heads and the rows that extend them.
        let found: Vec<(String, i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "begin immediate; select tenant_id, seq, row_hash from audit_chain_head where tenant_id in ({})",
            quoted(tenants.iter().map(|t| t.0))
        )))
        .fetch_all(&mut audit.conn)
        .await?;
        for (tenant, seq, hash) in found {
            heads.insert(TenantId(uuid(&tenant)?), (seq, hash));
        }
        ""
    };
    let mut rows = Vec::with_capacity(records.len());
    for record in records {
        let head = heads
            .get_mut(&record.tenant)
            .ok_or_else(|| StoreError::Corrupt("chain head".into()))?;
        let row = row_from_record(record, head.0 + 1, std::mem::take(&mut head.1));
        *head = (row.seq, row.row_hash.clone());
        rows.push(row);
    }
    let mut batch =
        QueryBuilder::<Sqlite>::new(format!("{begin}insert into audit_log ({AUDIT_COLUMNS}) "));
    batch.push_values(&rows, |mut b, row| {
        b.push_bind(id(row.call_id))
            .push_bind(id(row.tenant.0))
            .push_bind(row.seq)
            .push_bind(id(row.principal.0))
            .push_bind(&row.adapter)
            .push_bind(&row.tool)
            .push_bind(&row.arguments)
            .push_bind(&row.arguments_hash)
            .push_bind(&row.outcome)
            .push_bind(&row.error)
            .push_bind(row.duration_us)
            .push_bind(&row.request_id)
            .push_bind(&row.trace_id)
            .push_bind(row.run_id.map(|r| id(r.0)))
            .push_bind(row.step)
            .push_bind(&row.client)
            .push_bind(row.started_at)
            .push_bind(row.finished_at)
            .push_bind(&row.prev_hash)
            .push_bind(&row.row_hash)
            .push_bind(row.approval_id.map(id))
            .push_bind(&row.cache);
    });
    batch.push("; delete from call_intent where call_id in (");
    let mut ids = batch.separated(", ");
    for row in &rows {
        ids.push_bind(id(row.call_id));
    }
    batch.push("); insert into audit_chain_head (tenant_id, seq, row_hash) ");
    batch.push_values(&heads, |mut b, (tenant, (seq, hash))| {
        b.push_bind(id(tenant.0)).push_bind(*seq).push_bind(hash);
    });
    batch.push(
        " on conflict (tenant_id) do update set seq = excluded.seq, row_hash = excluded.row_hash; commit",
    );
    batch.build().execute(&mut audit.conn).await?;
    audit.heads.extend(heads);
    Ok(())
}

pub(crate) fn id(u: Uuid) -> String {
    u.hyphenated().to_string()
}

/// Ids as an SQL list of string literals (`'…', '…'`): hex digits and dashes only.
fn quoted(ids: impl Iterator<Item = Uuid>) -> String {
    ids.map(|u| format!("'{}'", id(u)))
        .collect::<Vec<_>>()
        .join(", ")
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
struct AuditDbRow {
    call_id: String,
    tenant_id: String,
    seq: i64,
    principal_id: String,
    adapter: String,
    tool: String,
    arguments: String,
    arguments_hash: String,
    outcome: String,
    error: Option<String>,
    duration_us: i64,
    request_id: Option<String>,
    trace_id: Option<String>,
    run_id: Option<String>,
    step: Option<i32>,
    client: Option<String>,
    approval_id: Option<String>,
    cache: Option<String>,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    prev_hash: String,
    row_hash: String,
}

impl AuditDbRow {
    fn into_model(self) -> Result<AuditRow, StoreError> {
        Ok(AuditRow {
            call_id: uuid(&self.call_id)?,
            tenant: TenantId(uuid(&self.tenant_id)?),
            seq: self.seq,
            principal: PrincipalId(uuid(&self.principal_id)?),
            adapter: self.adapter,
            tool: self.tool,
            arguments: self.arguments,
            arguments_hash: self.arguments_hash,
            outcome: self.outcome,
            error: self.error,
            duration_us: self.duration_us,
            request_id: self.request_id,
            trace_id: self.trace_id,
            run_id: self.run_id.as_deref().map(uuid).transpose()?.map(RunId),
            step: self.step,
            client: self.client,
            approval_id: self.approval_id.as_deref().map(uuid).transpose()?,
            cache: self.cache,
            started_at: self.started_at,
            finished_at: self.finished_at,
            prev_hash: self.prev_hash,
            row_hash: self.row_hash,
        })
    }
}

#[derive(sqlx::FromRow)]
struct IntentRow {
    call_id: String,
    tenant_id: String,
    principal_id: String,
    adapter: String,
    tool: String,
    arguments: String,
    arguments_hash: String,
    request_id: Option<String>,
    trace_id: Option<String>,
    run_id: Option<String>,
    step: Option<i64>,
    client: Option<String>,
    started_at: DateTime<Utc>,
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
const AUDIT_COLUMNS: &str = "call_id, tenant_id, seq, principal_id, adapter, tool, arguments, arguments_hash, outcome, error, duration_us, request_id, trace_id, run_id, step, client, started_at, finished_at, prev_hash, row_hash, approval_id, cache";

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
        })
    }

    /// The same file through a new pool, whose connections belong to the runtime that
    /// opens it (the audit writer's own thread).
    pub async fn reopen(&self) -> Result<Self, StoreError> {
        Self::open(&self.path, self.limits).await
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

    pub async fn put_mcp_session(&self, session: &McpSession) -> Result<(), StoreError> {
        sqlx::query(
            "insert into mcp_session (session_id, tenant_id, principal_id, initialize_params, created_at, last_used_at) values ($1, $2, $3, $4, $5, $5)",
        )
        .bind(&session.id)
        .bind(id(session.tenant.0))
        .bind(id(session.principal.0))
        .bind(&session.initialize_params)
        .bind(Utc::now())
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn mcp_session(&self, session: &str) -> Result<Option<McpSession>, StoreError> {
        let row: Option<(String, String, String)> = sqlx::query_as(
            "select tenant_id, principal_id, initialize_params from mcp_session where session_id = $1",
        )
        .bind(session)
        .fetch_optional(&self.pool)
        .await?;
        row.map(|(tenant, principal, params)| {
            Ok(McpSession {
                id: session.to_owned(),
                tenant: TenantId(uuid(&tenant)?),
                principal: PrincipalId(uuid(&principal)?),
                initialize_params: params,
            })
        })
        .transpose()
    }

    pub async fn delete_mcp_session(
        &self,
        tenant: TenantId,
        session: &str,
    ) -> Result<(), StoreError> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("delete from mcp_session where session_id = $1 and tenant_id = $2")
            .bind(session)
            .bind(id(tenant.0))
            .execute(&mut *tx)
            .await?;
        sqlx::query("delete from mcp_event where session_id = $1 and tenant_id = $2")
            .bind(session)
            .bind(id(tenant.0))
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn append_mcp_event(
        &self,
        tenant: TenantId,
        session: &str,
        stream: &str,
        message: Option<&str>,
        retry_ms: Option<i32>,
    ) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "insert into mcp_event (tenant_id, session_id, stream_id, message, retry_ms, created_at) values ($1, $2, $3, $4, $5, $6) returning event_seq",
        )
        .bind(id(tenant.0))
        .bind(session)
        .bind(stream)
        .bind(message)
        .bind(retry_ms)
        .bind(Utc::now())
        .fetch_one(&self.pool)
        .await?)
    }

    pub async fn mcp_events_after(
        &self,
        tenant: TenantId,
        session: &str,
        seq: i64,
    ) -> Result<Vec<McpEvent>, StoreError> {
        let rows: Vec<(i64, Option<String>, Option<i32>)> = sqlx::query_as(
            "select e.event_seq, e.message, e.retry_ms from mcp_event e
             join mcp_event last on last.event_seq = $3 and last.session_id = $2 and last.tenant_id = $1
             where e.tenant_id = $1 and e.session_id = $2 and e.stream_id = last.stream_id and e.event_seq > $3
             order by e.event_seq",
        )
        .bind(id(tenant.0))
        .bind(session)
        .bind(seq)
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(seq, message, retry_ms)| McpEvent {
                seq,
                message,
                retry_ms,
            })
            .collect())
    }

    pub async fn touch_mcp_sessions(
        &self,
        ids: &[String],
        at: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "update mcp_session set last_used_at = $2 where session_id in (select value from json_each($1))",
        )
        .bind(serde_json::to_string(ids).unwrap_or_default())
        .bind(at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    pub async fn prune_mcp_sessions(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut tx = self.pool.begin().await?;
        let gone: Vec<String> = sqlx::query_scalar(
            "delete from mcp_session where last_used_at < $1 returning session_id",
        )
        .bind(before)
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query("delete from mcp_event where session_id in (select value from json_each($1))")
            .bind(serde_json::to_string(&gone).unwrap_or_default())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone.len() as u64)
    }

    pub async fn prune_mcp_events(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let done = sqlx::query("delete from mcp_event where created_at < $1")
            .bind(before)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    pub async fn begin_call(&self, record: &AuditRecord) -> Result<(), StoreError> {
        sqlx::query(
            "insert into call_intent (call_id, tenant_id, principal_id, adapter, tool, arguments, arguments_hash, request_id, trace_id, run_id, step, client, started_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(id(record.call_id.0))
        .bind(id(record.tenant.0))
        .bind(id(record.principal.0))
        .bind(record.adapter.as_str())
        .bind(&record.tool)
        .bind(canonical_json(&record.arguments))
        .bind(&record.arguments_hash)
        .bind(&record.request_id)
        .bind(&record.trace_id)
        .bind(record.run.map(|r| id(r.run_id.0)))
        .bind(record.run.map(|r| i64::from(r.step)))
        .bind(&record.client)
        .bind(DateTime::<Utc>::from(record.started_at))
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Appends `records` in one transaction, extending each tenant's chain.
    ///
    /// Every statement is a round trip to the connection's own thread (sqlx runs SQLite
    /// there), so a batch is one: the write lock, the rows, the intents cleared, the chain
    /// heads moved and the commit, in one multi-statement query whose text depends only on
    /// the numbers of records and tenants (prepared once for each). The chain heads come
    /// from the previous batch on this connection; no read is needed to extend them. That
    /// is safe because `(tenant_id, seq)` is unique: if another connection appended since,
    /// the first row reuses a taken `seq` and the batch fails whole; it is then retried
    /// once with the heads read under the write lock, as a batch for a tenant this
    /// connection has not written is.
    pub async fn append_audit(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        let tenants: BTreeSet<TenantId> = records.iter().map(|r| r.tenant).collect();
        if tenants.is_empty() {
            return Ok(());
        }
        let mut held = self.audit_conn.lock().await;
        let mut reread = false;
        loop {
            let audit = match &mut *held {
                Some(audit) => audit,
                None => held.insert(AuditConn {
                    conn: self.pool.acquire().await?.detach(),
                    heads: BTreeMap::new(),
                }),
            };
            let from_memory = !reread && tenants.iter().all(|t| audit.heads.contains_key(t));
            match append_batch(audit, &tenants, records, from_memory).await {
                Ok(()) => return Ok(()),
                Err(err) => {
                    let _ = sqlx::query("rollback").execute(&mut audit.conn).await;
                    *held = None;
                    if !from_memory {
                        return Err(err);
                    }
                    tracing::debug!(error = %err, "audit batch from remembered chain heads failed; retrying under the write lock");
                    reread = true;
                }
            }
        }
    }

    /// Calls with side effects that started and were never recorded (the gateway stopped
    /// mid-call).
    pub async fn unfinished_calls(&self) -> Result<Vec<AuditRecord>, StoreError> {
        let rows: Vec<IntentRow> = sqlx::query_as(
            "select call_id, tenant_id, principal_id, adapter, tool, arguments, arguments_hash, request_id, trace_id, run_id, step, client, started_at from call_intent",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|r| {
                crate::interrupted(crate::IntentFields {
                    call_id: uuid(&r.call_id)?,
                    tenant: uuid(&r.tenant_id)?,
                    principal: uuid(&r.principal_id)?,
                    adapter: r.adapter,
                    tool: r.tool,
                    arguments: r.arguments,
                    arguments_hash: r.arguments_hash,
                    request_id: r.request_id,
                    trace_id: r.trace_id,
                    run_id: r.run_id.as_deref().map(uuid).transpose()?,
                    step: r.step,
                    client: r.client,
                    started_at: r.started_at,
                })
            })
            .collect()
    }

    pub async fn list_audit(
        &self,
        tenant: TenantId,
        filter: &AuditFilter,
        limit: i64,
    ) -> Result<Vec<AuditRow>, StoreError> {
        let mut q = QueryBuilder::<Sqlite>::new(format!(
            "select {AUDIT_COLUMNS} from audit_log where tenant_id = "
        ));
        q.push_bind(id(tenant.0));
        if let Some(tool) = &filter.tool {
            q.push(" and tool = ").push_bind(tool.clone());
        }
        if let Some(p) = filter.principal {
            q.push(" and principal_id = ").push_bind(id(p.0));
        }
        if let Some(a) = &filter.adapter {
            q.push(" and adapter = ").push_bind(a.clone());
        }
        if let Some(o) = &filter.outcome {
            q.push(" and outcome = ").push_bind(o.clone());
        }
        if let Some(r) = filter.run_id {
            q.push(" and run_id = ").push_bind(id(r.0));
        }
        if let Some(t) = filter.since {
            q.push(" and started_at >= ").push_bind(t);
        }
        if let Some(t) = filter.until {
            q.push(" and started_at < ").push_bind(t);
        }
        if let Some(c) = filter.call_id {
            q.push(" and call_id = ").push_bind(id(c));
        }
        if let Some(t) = &filter.trace_id {
            q.push(" and trace_id = ").push_bind(t.clone());
        }
        if let Some(s) = filter.before_seq {
            q.push(" and seq < ").push_bind(s);
        }
        match filter.after_seq {
            Some(s) => q
                .push(" and seq > ")
                .push_bind(s)
                .push(" order by seq asc limit "),
            None => q.push(" order by seq desc limit "),
        };
        q.push_bind(limit);
        let rows: Vec<AuditDbRow> = q.build_query_as().fetch_all(&self.pool).await?;
        rows.into_iter().map(AuditDbRow::into_model).collect()
    }

    /// A tenant's stored chain head, `None` before its first row.
    pub async fn audit_head(&self, tenant: TenantId) -> Result<Option<(i64, String)>, StoreError> {
        Ok(
            sqlx::query_as("select seq, row_hash from audit_chain_head where tenant_id = $1")
                .bind(id(tenant.0))
                .fetch_optional(&self.pool)
                .await?,
        )
    }

    /// Every tenant's chain head that no checkpoint covers yet.
    pub async fn unsigned_heads(&self) -> Result<Vec<(TenantId, i64, String)>, StoreError> {
        let rows: Vec<(String, i64, String)> = sqlx::query_as(
            "select h.tenant_id, h.seq, h.row_hash from audit_chain_head h \
             where h.seq > coalesce((select max(c.seq) from audit_checkpoint c where c.tenant_id = h.tenant_id), 0)",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|(t, seq, hash)| Ok((TenantId(uuid(&t)?), seq, hash)))
            .collect()
    }

    pub async fn insert_checkpoint(&self, cp: &Checkpoint) -> Result<(), StoreError> {
        sqlx::query(
            "insert into audit_checkpoint (tenant_id, seq, row_hash, key_id, signature, signed_at) \
             values ($1, $2, $3, $4, $5, $6) on conflict do nothing",
        )
        .bind(id(cp.tenant.0))
        .bind(cp.seq)
        .bind(&cp.row_hash)
        .bind(&cp.key_id)
        .bind(&cp.signature)
        .bind(cp.signed_at)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// A tenant's checkpoints in chain order.
    pub async fn checkpoints(&self, tenant: TenantId) -> Result<Vec<Checkpoint>, StoreError> {
        let rows: Vec<crate::checkpoint::CheckpointRow> = sqlx::query_as(
            "select seq, row_hash, key_id, signature, signed_at from audit_checkpoint \
             where tenant_id = $1 order by seq",
        )
        .bind(id(tenant.0))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|row| Checkpoint::from_row(tenant, row))
            .collect())
    }

    /// A tenant's whole chain in order, for verification.
    pub async fn audit_chain(&self, tenant: TenantId) -> Result<Vec<AuditRow>, StoreError> {
        let rows: Vec<AuditDbRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "select {AUDIT_COLUMNS} from audit_log where tenant_id = $1 order by seq"
        )))
        .bind(id(tenant.0))
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter().map(AuditDbRow::into_model).collect()
    }

    pub async fn record_security_event(
        &self,
        source: Option<&str>,
        route: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("insert into security_event (occurred_at, source, route, reason) values ($1, $2, $3, $4)")
            .bind(now())
            .bind(source)
            .bind(route)
            .bind(reason)
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

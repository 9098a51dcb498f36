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
use toolgate_core::{PrincipalId, RunId, TenantId};
use uuid::Uuid;

use crate::chain::{GENESIS, canonical_json, row_from_record};
use crate::checkpoint::Checkpoint;
use crate::model::*;
use crate::{StoreError, keys};

pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../../migrations/postgres");

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
struct AuditDbRow {
    call_id: Uuid,
    tenant_id: Uuid,
    seq: i64,
    principal_id: Uuid,
    adapter: String,
    tool: String,
    arguments: String,
    arguments_hash: String,
    outcome: String,
    error: Option<String>,
    duration_us: i64,
    request_id: Option<String>,
    trace_id: Option<String>,
    run_id: Option<Uuid>,
    step: Option<i32>,
    client: Option<String>,
    approval_id: Option<Uuid>,
    cache: Option<String>,
    started_at: DateTime<Utc>,
    finished_at: DateTime<Utc>,
    prev_hash: String,
    row_hash: String,
}

impl From<AuditDbRow> for AuditRow {
    fn from(r: AuditDbRow) -> Self {
        AuditRow {
            call_id: r.call_id,
            tenant: TenantId(r.tenant_id),
            seq: r.seq,
            principal: PrincipalId(r.principal_id),
            adapter: r.adapter,
            tool: r.tool,
            arguments: r.arguments,
            arguments_hash: r.arguments_hash,
            outcome: r.outcome,
            error: r.error,
            duration_us: r.duration_us,
            request_id: r.request_id,
            trace_id: r.trace_id,
            run_id: r.run_id.map(RunId),
            step: r.step,
            client: r.client,
            approval_id: r.approval_id,
            cache: r.cache,
            started_at: r.started_at,
            finished_at: r.finished_at,
            prev_hash: r.prev_hash,
            row_hash: r.row_hash,
        }
    }
}

#[derive(sqlx::FromRow)]
struct IntentRow {
    call_id: Uuid,
    tenant_id: Uuid,
    principal_id: Uuid,
    adapter: String,
    tool: String,
    arguments: String,
    arguments_hash: String,
    request_id: Option<String>,
    trace_id: Option<String>,
    run_id: Option<Uuid>,
    step: Option<i32>,
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
const PRINCIPAL_COLUMNS: &str = "principal_id, tenant_id, kind, name, roles, scopes, created_at";
const AUDIT_SELECT: &str = "select call_id, tenant_id, seq, principal_id, adapter, tool, arguments::text as arguments, arguments_hash, outcome, error, duration_us, request_id, trace_id, run_id, step, client, approval_id, cache, started_at, finished_at, prev_hash, row_hash from audit_log";

impl PostgresStore {
    /// Pools on `url`; connections open on first use.
    pub async fn connect(url: &str, limits: crate::StoreLimits) -> Result<Self, StoreError> {
        let options: PgConnectOptions = url.parse()?;
        Ok(Self::from_options(options, limits))
    }

    /// The same database through new pools, whose connections belong to the runtime
    /// that first uses them (the audit writer's own thread).
    pub fn reopen(&self) -> Self {
        Self::from_options((*self.options).clone(), self.limits)
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

    pub async fn put_mcp_session(&self, session: &McpSession) -> Result<(), StoreError> {
        let mut tx = self.tenant_tx(session.tenant).await?;
        sqlx::query(
            "insert into mcp_session (session_id, tenant_id, principal_id, initialize_params) values ($1, $2, $3, $4::json)",
        )
        .bind(&session.id)
        .bind(session.tenant.0)
        .bind(session.principal.0)
        .bind(&session.initialize_params)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    pub async fn mcp_session(&self, id: &str) -> Result<Option<McpSession>, StoreError> {
        let row: Option<(Uuid, Uuid, String)> = sqlx::query_as(
            "select tenant_id, principal_id, initialize_params::text from mcp_session where session_id = $1",
        )
        .bind(id)
        .fetch_optional(&self.owner)
        .await?;
        Ok(row.map(|(tenant, principal, params)| McpSession {
            id: id.to_owned(),
            tenant: TenantId(tenant),
            principal: PrincipalId(principal),
            initialize_params: params,
        }))
    }

    pub async fn delete_mcp_session(&self, tenant: TenantId, id: &str) -> Result<(), StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        sqlx::query("delete from mcp_session where session_id = $1")
            .bind(id)
            .execute(&mut *tx)
            .await?;
        sqlx::query("delete from mcp_event where session_id = $1")
            .bind(id)
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
        let mut tx = self.tenant_tx(tenant).await?;
        let seq = sqlx::query_scalar(
            "insert into mcp_event (tenant_id, session_id, stream_id, message, retry_ms) values ($1, $2, $3, $4, $5) returning event_seq",
        )
        .bind(tenant.0)
        .bind(session)
        .bind(stream)
        .bind(message)
        .bind(retry_ms)
        .fetch_one(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(seq)
    }

    pub async fn mcp_events_after(
        &self,
        tenant: TenantId,
        session: &str,
        seq: i64,
    ) -> Result<Vec<McpEvent>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<(i64, Option<String>, Option<i32>)> = sqlx::query_as(
            "select e.event_seq, e.message, e.retry_ms from mcp_event e
             join mcp_event last on last.event_seq = $2 and last.session_id = $1
             where e.session_id = $1 and e.stream_id = last.stream_id and e.event_seq > $2
             order by e.event_seq",
        )
        .bind(session)
        .bind(seq)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
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
        sqlx::query("update mcp_session set last_used_at = $2 where session_id = any($1)")
            .bind(ids)
            .bind(at)
            .execute(&self.owner)
            .await?;
        Ok(())
    }

    pub async fn prune_mcp_sessions(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let mut tx = self.owner.begin().await?;
        let gone: Vec<String> = sqlx::query_scalar(
            "delete from mcp_session where last_used_at < $1 returning session_id",
        )
        .bind(before)
        .fetch_all(&mut *tx)
        .await?;
        sqlx::query("delete from mcp_event where session_id = any($1)")
            .bind(&gone)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(gone.len() as u64)
    }

    pub async fn prune_mcp_events(&self, before: DateTime<Utc>) -> Result<u64, StoreError> {
        let done = sqlx::query("delete from mcp_event where created_at < $1")
            .bind(before)
            .execute(&self.owner)
            .await?;
        Ok(done.rows_affected())
    }

    pub async fn begin_call(&self, record: &AuditRecord) -> Result<(), StoreError> {
        let mut tx = self.tenant_tx(record.tenant).await?;
        sqlx::query(
            "insert into call_intent (call_id, tenant_id, principal_id, adapter, tool, arguments, arguments_hash, request_id, trace_id, run_id, step, client, started_at)
             values ($1, $2, $3, $4, $5, $6::json, $7, $8, $9, $10, $11, $12, $13)",
        )
        .bind(record.call_id.0)
        .bind(record.tenant.0)
        .bind(record.principal.0)
        .bind(record.adapter.as_str())
        .bind(&record.tool)
        .bind(canonical_json(&record.arguments))
        .bind(&record.arguments_hash)
        .bind(&record.request_id)
        .bind(&record.trace_id)
        .bind(record.run.map(|r| r.run_id.0))
        .bind(record.run.map(|r| i32::try_from(r.step).unwrap_or(i32::MAX)))
        .bind(&record.client)
        .bind(DateTime::<Utc>::from(record.started_at))
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Appends `records` atomically, extending each tenant's chain.
    ///
    /// Per tenant it is one call of `toolgate_append_audit` (migration 0009): the chain
    /// head moves from the position this writer last saw to the new one *only if it is
    /// still there*, and the rows are inserted only if the head moved. Another instance
    /// having extended the chain meanwhile makes it a no-op; the head is then read under
    /// `for update` and the rows are chained again from it.
    ///
    /// The common case — one tenant, a head this writer knows, one statement's worth of
    /// rows — is that one call in autocommit: one round trip, its own transaction and
    /// commit. Otherwise the calls share an explicit transaction.
    pub async fn append_audit(&self, records: &[AuditRecord]) -> Result<(), StoreError> {
        let mut held = self.audit_conn.lock().await;
        // The held connection may have died since the last batch (a server restart, an
        // idle timeout): the batch is then tried once more on a new connection, as the
        // pool's ping would have found it dead. Each attempt is one transaction; should
        // the first have committed unseen, the second fails on the calls' primary keys.
        if let Some(conn) = held.as_mut() {
            match self.append_on(conn, records).await {
                Ok(()) => return Ok(()),
                Err(err) => {
                    tracing::debug!(error = %err, "audit append failed on the held connection; trying a new one");
                    *held = None;
                }
            }
        }
        let conn = held.insert(self.app.acquire().await?.detach());
        let appended = self.append_on(conn, records).await;
        if appended.is_err() {
            *held = None;
        }
        appended
    }

    async fn append_on(
        &self,
        conn: &mut PgConnection,
        records: &[AuditRecord],
    ) -> Result<(), StoreError> {
        let mut by_tenant: BTreeMap<TenantId, Vec<&AuditRecord>> = BTreeMap::new();
        for record in records {
            by_tenant.entry(record.tenant).or_default().push(record);
        }
        let Some(first) = by_tenant.keys().next().copied() else {
            return Ok(());
        };
        if by_tenant.len() == 1
            && records.len() <= ROWS_PER_STATEMENT
            && let Some(expected) = self.cached_head(first)
        {
            let rows = chain_rows(&by_tenant[&first], &expected);
            let appended = try_append(&mut *conn, first, &expected, &rows).await;
            let moved = rows
                .last()
                .map(|last| (first, (last.seq, last.row_hash.clone())));
            self.settle_heads(matches!(appended, Ok(true)), moved, std::iter::once(first));
            // `Ok(false)`: another instance moved the head; lock it and chain again, below.
            if appended? {
                return Ok(());
            }
        }
        let mut tx = conn.begin_with(begin_for(first)).await?;
        let mut moved = Vec::new();
        for (tenant, records) in &by_tenant {
            if *tenant != first {
                set_tenant(&mut tx, *tenant).await?;
            }
            let expected = match self.cached_head(*tenant) {
                Some(head) => head,
                None => read_head(&mut tx, *tenant, false).await?,
            };
            let mut rows = chain_rows(records, &expected);
            if !append_chunks(&mut tx, *tenant, &expected, &rows).await? {
                let head = read_head(&mut tx, *tenant, true).await?;
                rows = chain_rows(records, &head);
                if !append_chunks(&mut tx, *tenant, &head, &rows).await? {
                    return Err(StoreError::Corrupt(
                        "audit chain head moved while locked".into(),
                    ));
                }
            }
            if let Some(last) = rows.last() {
                moved.push((*tenant, (last.seq, last.row_hash.clone())));
            }
        }
        let committed = tx.commit().await;
        self.settle_heads(committed.is_ok(), moved, by_tenant.keys().copied());
        Ok(committed?)
    }

    /// What an append did to the chain heads this writer knows: the heads it `moved`
    /// when it committed; otherwise none of `tenants`' heads is known (the next append
    /// reads them again).
    fn settle_heads(
        &self,
        committed: bool,
        moved: impl IntoIterator<Item = (TenantId, (i64, String))>,
        tenants: impl IntoIterator<Item = TenantId>,
    ) {
        let mut heads = self.heads.lock().unwrap_or_else(|p| p.into_inner());
        if committed {
            heads.extend(moved);
        } else {
            for tenant in tenants {
                heads.remove(&tenant);
            }
        }
    }

    /// The chain head this writer last committed for `tenant`, if it knows one.
    fn cached_head(&self, tenant: TenantId) -> Option<(i64, String)> {
        self.heads
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&tenant)
            .cloned()
    }

    pub async fn unfinished_calls(&self) -> Result<Vec<AuditRecord>, StoreError> {
        let rows: Vec<IntentRow> = sqlx::query_as(
            "select call_id, tenant_id, principal_id, adapter, tool, arguments::text as arguments, arguments_hash, request_id, trace_id, run_id, step, client, started_at from call_intent",
        )
        .fetch_all(&self.owner)
        .await?;
        rows.into_iter()
            .map(|r| {
                crate::interrupted(crate::IntentFields {
                    call_id: r.call_id,
                    tenant: r.tenant_id,
                    principal: r.principal_id,
                    adapter: r.adapter,
                    tool: r.tool,
                    arguments: r.arguments,
                    arguments_hash: r.arguments_hash,
                    request_id: r.request_id,
                    trace_id: r.trace_id,
                    run_id: r.run_id,
                    step: r.step.map(i64::from),
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
        let mut q = QueryBuilder::<Postgres>::new(AUDIT_SELECT);
        q.push(" where tenant_id = ").push_bind(tenant.0);
        if let Some(tool) = &filter.tool {
            q.push(" and tool = ").push_bind(tool.clone());
        }
        if let Some(p) = filter.principal {
            q.push(" and principal_id = ").push_bind(p.0);
        }
        if let Some(a) = &filter.adapter {
            q.push(" and adapter = ").push_bind(a.clone());
        }
        if let Some(o) = &filter.outcome {
            q.push(" and outcome = ").push_bind(o.clone());
        }
        if let Some(r) = filter.run_id {
            q.push(" and run_id = ").push_bind(r.0);
        }
        if let Some(t) = filter.since {
            q.push(" and started_at >= ").push_bind(t);
        }
        if let Some(t) = filter.until {
            q.push(" and started_at < ").push_bind(t);
        }
        if let Some(c) = filter.call_id {
            q.push(" and call_id = ").push_bind(c);
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
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<AuditDbRow> = q.build_query_as().fetch_all(&mut *tx).await?;
        tx.commit().await?;
        Ok(rows.into_iter().map(AuditRow::from).collect())
    }

    pub async fn audit_chain(&self, tenant: TenantId) -> Result<Vec<AuditRow>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<AuditDbRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "{AUDIT_SELECT} where tenant_id = $1 order by seq"
        )))
        .bind(tenant.0)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows.into_iter().map(AuditRow::from).collect())
    }

    /// A tenant's stored chain head, `None` before its first row.
    pub async fn audit_head(&self, tenant: TenantId) -> Result<Option<(i64, String)>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let head =
            sqlx::query_as("select seq, row_hash from audit_chain_head where tenant_id = $1")
                .bind(tenant.0)
                .fetch_optional(&mut *tx)
                .await?;
        tx.commit().await?;
        Ok(head)
    }

    /// Every tenant's chain head that no checkpoint covers yet.
    pub async fn unsigned_heads(&self) -> Result<Vec<(TenantId, i64, String)>, StoreError> {
        let rows: Vec<(Uuid, i64, String)> = sqlx::query_as(
            "select h.tenant_id, h.seq, h.row_hash from audit_chain_head h \
             where h.seq > coalesce((select max(c.seq) from audit_checkpoint c where c.tenant_id = h.tenant_id), 0)",
        )
        .fetch_all(&self.owner)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(t, seq, hash)| (TenantId(t), seq, hash))
            .collect())
    }

    pub async fn insert_checkpoint(&self, cp: &Checkpoint) -> Result<(), StoreError> {
        let mut tx = self.tenant_tx(cp.tenant).await?;
        sqlx::query(
            "insert into audit_checkpoint (tenant_id, seq, row_hash, key_id, signature, signed_at) \
             values ($1, $2, $3, $4, $5, $6) on conflict do nothing",
        )
        .bind(cp.tenant.0)
        .bind(cp.seq)
        .bind(&cp.row_hash)
        .bind(&cp.key_id)
        .bind(&cp.signature)
        .bind(cp.signed_at)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// A tenant's checkpoints in chain order.
    pub async fn checkpoints(&self, tenant: TenantId) -> Result<Vec<Checkpoint>, StoreError> {
        let mut tx = self.tenant_tx(tenant).await?;
        let rows: Vec<crate::checkpoint::CheckpointRow> = sqlx::query_as(
            "select seq, row_hash, key_id, signature, signed_at from audit_checkpoint \
             where tenant_id = $1 order by seq",
        )
        .bind(tenant.0)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(rows
            .into_iter()
            .map(|row| Checkpoint::from_row(tenant, row))
            .collect())
    }

    pub async fn record_security_event(
        &self,
        source: Option<&str>,
        route: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("insert into security_event (source, route, reason) values ($1, $2, $3)")
            .bind(source)
            .bind(route)
            .bind(reason)
            .execute(&self.app)
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

/// A tenant's chain head: `(seq, row_hash)`, `(0, GENESIS)` before its first row.
async fn read_head(
    tx: &mut Transaction<'_, Postgres>,
    tenant: TenantId,
    lock: bool,
) -> Result<(i64, String), StoreError> {
    let sql = if lock {
        "select seq, row_hash from audit_chain_head where tenant_id = $1 for update"
    } else {
        "select seq, row_hash from audit_chain_head where tenant_id = $1"
    };
    let head: Option<(i64, String)> = sqlx::query_as(sql)
        .bind(tenant.0)
        .fetch_optional(&mut **tx)
        .await?;
    Ok(head.unwrap_or((0, GENESIS.to_owned())))
}

fn chain_rows(records: &[&AuditRecord], head: &(i64, String)) -> Vec<AuditRow> {
    let (mut seq, mut prev) = head.clone();
    records
        .iter()
        .map(|record| {
            let row = row_from_record(record, seq + 1, prev.clone());
            seq = row.seq;
            prev = row.row_hash.clone();
            row
        })
        .collect()
}

/// The `NOTIFY` channel that announces key revocations to every instance.
const REVOCATIONS_CHANNEL: &str = "toolgate_key_revoked";

/// Rows per statement, to bound a statement's size; a batch is one or more statements in
/// one transaction, so the commit is shared. (It was 16 while connections left Nagle's
/// algorithm on, see [`crate::nodelay`]: larger statements stalled ~40 ms each.)
const ROWS_PER_STATEMENT: usize = 128;

/// Appends `rows` chunk by chunk, each chunk moving the head on from the previous one.
/// `false` (nothing written) when the first chunk finds the head moved by someone else;
/// after it succeeds, this transaction holds the head row's lock.
async fn append_chunks(
    tx: &mut Transaction<'_, Postgres>,
    tenant: TenantId,
    expected: &(i64, String),
    rows: &[AuditRow],
) -> Result<bool, StoreError> {
    let mut head = expected.clone();
    for (i, chunk) in rows.chunks(ROWS_PER_STATEMENT).enumerate() {
        if !try_append(&mut **tx, tenant, &head, chunk).await? {
            if i == 0 {
                return Ok(false);
            }
            return Err(StoreError::Corrupt(
                "audit chain head moved while locked".into(),
            ));
        }
        if let Some(last) = chunk.last() {
            head = (last.seq, last.row_hash.clone());
        }
    }
    Ok(true)
}

/// Moves the head from `expected` to the last of `rows` and inserts `rows`, in one
/// statement; `false` (and nothing written) when the head is no longer at `expected`.
/// Rows travel as arrays, so the statement text is the same for every batch size:
/// prepared once per connection, never re-planned for a new shape.
async fn try_append<'c>(
    db: impl sqlx::PgExecutor<'c>,
    tenant: TenantId,
    expected: &(i64, String),
    rows: &[AuditRow],
) -> Result<bool, StoreError> {
    let Some(last) = rows.last() else {
        return Ok(true);
    };
    let col = |f: fn(&AuditRow) -> String| rows.iter().map(f).collect::<Vec<String>>();
    let opt =
        |f: fn(&AuditRow) -> Option<String>| rows.iter().map(f).collect::<Vec<Option<String>>>();
    let inserted: i64 = sqlx::query_scalar(APPEND)
        .bind(tenant.0)
        .bind(last.seq)
        .bind(&last.row_hash)
        .bind(expected.0)
        .bind(&expected.1)
        .bind(rows.iter().map(|r| r.call_id).collect::<Vec<Uuid>>())
        .bind(rows.iter().map(|r| r.seq).collect::<Vec<i64>>())
        .bind(rows.iter().map(|r| r.principal.0).collect::<Vec<Uuid>>())
        .bind(col(|r| r.adapter.clone()))
        .bind(col(|r| r.tool.clone()))
        .bind(col(|r| r.arguments.clone()))
        .bind(col(|r| r.arguments_hash.clone()))
        .bind(col(|r| r.outcome.clone()))
        .bind(opt(|r| r.error.clone()))
        .bind(rows.iter().map(|r| r.duration_us).collect::<Vec<i64>>())
        .bind(opt(|r| r.request_id.clone()))
        .bind(opt(|r| r.trace_id.clone()))
        .bind(
            rows.iter()
                .map(|r| r.run_id.map(|id| id.0))
                .collect::<Vec<Option<Uuid>>>(),
        )
        .bind(rows.iter().map(|r| r.step).collect::<Vec<Option<i32>>>())
        .bind(opt(|r| r.client.clone()))
        .bind(
            rows.iter()
                .map(|r| r.started_at)
                .collect::<Vec<DateTime<Utc>>>(),
        )
        .bind(
            rows.iter()
                .map(|r| r.finished_at)
                .collect::<Vec<DateTime<Utc>>>(),
        )
        .bind(col(|r| r.prev_hash.clone()))
        .bind(col(|r| r.row_hash.clone()))
        .bind(
            rows.iter()
                .map(|r| r.approval_id)
                .collect::<Vec<Option<Uuid>>>(),
        )
        .bind(opt(|r| r.cache.clone()))
        .fetch_one(db)
        .await?;
    Ok(inserted == rows.len() as i64)
}

const APPEND: &str = "select toolgate_append_audit($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, \
    $16, $17, $18, $19, $20, $21, $22, $23, $24, $25, $26)";

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

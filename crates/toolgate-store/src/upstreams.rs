//! Tenants' own upstream MCP servers, on both backends.
//!
//! The store keeps what the gateway gives it: a JSON document without secrets, and the
//! credentials already sealed (opaque bytes). As in [`crate::approvals`], one macro writes
//! both implementations, ids and JSON travelling as text and cast on Postgres.

use chrono::{DateTime, Utc};
use serde_json::Value;
use toolgate_core::{PrincipalId, TenantId};
use uuid::Uuid;

use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::text::{sql, uuid};
use crate::{Store, StoreError};

pub use toolgate_core::stores::UpstreamRecord;

/// What a tenant upstream is to be, on creation or replacement.
#[derive(Clone, Debug)]
pub struct UpstreamWrite<'a> {
    pub name: &'a str,
    pub config: &'a Value,
    pub credentials: Option<&'a [u8]>,
}

const CONFLICT: &str = "an upstream with this name exists in your tenant";
const CONSTRAINT: &str = "tenant_upstream_tenant_name_key";

#[derive(sqlx::FromRow)]
struct Row {
    upstream_id: String,
    tenant_id: String,
    name: String,
    config: String,
    credentials: Option<Vec<u8>>,
    revision: i64,
    created_by: Option<String>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

impl Row {
    fn into_record(self) -> Result<UpstreamRecord, StoreError> {
        Ok(UpstreamRecord {
            id: uuid(&self.upstream_id)?,
            tenant: TenantId(uuid(&self.tenant_id)?),
            name: self.name,
            config: serde_json::from_str(&self.config)
                .map_err(|e| StoreError::Corrupt(format!("stored upstream: {e}")))?,
            credentials: self.credentials,
            revision: self.revision,
            created_by: self
                .created_by
                .as_deref()
                .map(uuid)
                .transpose()?
                .map(PrincipalId),
            created_at: self.created_at,
            updated_at: self.updated_at,
        })
    }
}

/// `$cross`: the pool that reads across tenants; `$u`: the cast of a text parameter to a
/// uuid; `$j`: to JSON; `$t`: of a uuid or JSON column to text.
/// `$lock`: a statement that serializes, until the transaction ends, the tenant's
/// creations (SQLite's write transaction already does).
macro_rules! upstream_store {
    ($store:ty, $cross:ident, $u:literal, $j:literal, $t:literal, $lock:literal) => {
        impl $store {
            fn upstream_columns() -> String {
                format!(
                    "upstream_id{t} as upstream_id, tenant_id{t} as tenant_id, name, config{t} as config, credentials, \
                     cast(revision as bigint) as revision, created_by{t} as created_by, created_at, updated_at",
                    t = $t
                )
            }

            pub async fn create_upstream(
                &self,
                tenant: TenantId,
                new: &UpstreamWrite<'_>,
                by: PrincipalId,
                most: usize,
            ) -> Result<UpstreamRecord, StoreError> {
                let now = Utc::now();
                let mut tx = self.tenant_tx(tenant).await?;
                // Counted and inserted under one lock: two creations at once cannot both
                // take the last place.
                sqlx::query($lock)
                    .bind(tenant.to_string())
                    .execute(&mut *tx)
                    .await?;
                let (count,): (i64,) = sqlx::query_as(sql(format!(
                    "select count(*) from tenant_upstream where tenant_id = $1{u}",
                    u = $u
                )))
                .bind(tenant.to_string())
                .fetch_one(&mut *tx)
                .await?;
                if usize::try_from(count).unwrap_or(usize::MAX) >= most {
                    return Err(StoreError::Conflict(format!(
                        "your tenant has {count} upstreams, the most allowed (tenant_upstreams.max_per_tenant)"
                    )));
                }
                let row: Row = sqlx::query_as(sql(format!(
                    "insert into tenant_upstream (upstream_id, tenant_id, name, config, credentials, revision, created_by, created_at, updated_at) \
                     values ($1{u}, $2{u}, $3, $4{j}, $5, 1, $6{u}, $7, $7) returning {columns}",
                    u = $u,
                    j = $j,
                    columns = Self::upstream_columns()
                )))
                .bind(Uuid::now_v7().to_string())
                .bind(tenant.to_string())
                .bind(new.name)
                .bind(new.config.to_string())
                .bind(new.credentials)
                .bind(by.to_string())
                .bind(now)
                .fetch_one(&mut *tx)
                .await
                .map_err(|e| StoreError::on_constraint(e, CONSTRAINT, CONFLICT))?;
                tx.commit().await?;
                row.into_record()
            }

            /// The tenant's upstreams by name, or only the one named `only`.
            pub async fn upstreams(
                &self,
                tenant: TenantId,
                only: Option<&str>,
            ) -> Result<Vec<UpstreamRecord>, StoreError> {
                let mut tx = self.tenant_read(tenant).await?;
                let rows: Vec<Row> = sqlx::query_as(sql(format!(
                    "select {columns} from tenant_upstream where tenant_id = $1{u} and ($2 = '' or name = $2) order by name",
                    u = $u,
                    columns = Self::upstream_columns()
                )))
                .bind(tenant.to_string())
                .bind(only.unwrap_or_default())
                .fetch_all(&mut *tx)
                .await?;
                tx.commit().await?;
                rows.into_iter().map(Row::into_record).collect()
            }

            /// Replaces the upstream named `name`; `None` when the tenant has none.
            pub async fn update_upstream(
                &self,
                tenant: TenantId,
                name: &str,
                new: &UpstreamWrite<'_>,
            ) -> Result<Option<UpstreamRecord>, StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                let row: Option<Row> = sqlx::query_as(sql(format!(
                    "update tenant_upstream set name = $3, config = $4{j}, credentials = $5, revision = revision + 1, updated_at = $6 \
                     where tenant_id = $1{u} and name = $2 returning {columns}",
                    u = $u,
                    j = $j,
                    columns = Self::upstream_columns()
                )))
                .bind(tenant.to_string())
                .bind(name)
                .bind(new.name)
                .bind(new.config.to_string())
                .bind(new.credentials)
                .bind(Utc::now())
                .fetch_optional(&mut *tx)
                .await
                .map_err(|e| StoreError::on_constraint(e, CONSTRAINT, CONFLICT))?;
                tx.commit().await?;
                row.map(Row::into_record).transpose()
            }

            pub async fn delete_upstream(
                &self,
                tenant: TenantId,
                name: &str,
            ) -> Result<bool, StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                let done = sqlx::query(sql(format!(
                    "delete from tenant_upstream where tenant_id = $1{u} and name = $2",
                    u = $u
                )))
                .bind(tenant.to_string())
                .bind(name)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            /// Stores `principal`'s own (sealed) credential for upstream `upstream`.
            pub async fn put_personal_credential(
                &self,
                tenant: TenantId,
                upstream: Uuid,
                principal: PrincipalId,
                sealed: &[u8],
            ) -> Result<(), StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                sqlx::query(sql(format!(
                    "insert into principal_credential (tenant_id, upstream_id, principal_id, credentials, updated_at) \
                     values ($1{u}, $2{u}, $3{u}, $4, $5) on conflict (upstream_id, principal_id) \
                     do update set credentials = excluded.credentials, updated_at = excluded.updated_at",
                    u = $u
                )))
                .bind(tenant.to_string())
                .bind(upstream.to_string())
                .bind(principal.to_string())
                .bind(sealed)
                .bind(Utc::now())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            /// `principal`'s own (sealed) credential for upstream `upstream`, if stored.
            pub async fn personal_credential(
                &self,
                tenant: TenantId,
                upstream: Uuid,
                principal: PrincipalId,
            ) -> Result<Option<Vec<u8>>, StoreError> {
                let mut tx = self.tenant_read(tenant).await?;
                let row: Option<(Vec<u8>,)> = sqlx::query_as(sql(format!(
                    "select credentials from principal_credential \
                     where tenant_id = $1{u} and upstream_id = $2{u} and principal_id = $3{u}",
                    u = $u
                )))
                .bind(tenant.to_string())
                .bind(upstream.to_string())
                .bind(principal.to_string())
                .fetch_optional(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(row.map(|(sealed,)| sealed))
            }

            /// Forgets `principal`'s own credential for `upstream`; whether there was one.
            pub async fn delete_personal_credential(
                &self,
                tenant: TenantId,
                upstream: Uuid,
                principal: PrincipalId,
            ) -> Result<bool, StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                let done = sqlx::query(sql(format!(
                    "delete from principal_credential \
                     where tenant_id = $1{u} and upstream_id = $2{u} and principal_id = $3{u}",
                    u = $u
                )))
                .bind(tenant.to_string())
                .bind(upstream.to_string())
                .bind(principal.to_string())
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            /// Every principal's own sealed credential, across tenants.
            pub async fn personal_credentials(
                &self,
            ) -> Result<Vec<(TenantId, Uuid, PrincipalId, Vec<u8>)>, StoreError> {
                let rows: Vec<(String, String, String, Vec<u8>)> = sqlx::query_as(sql(format!(
                    "select tenant_id{t}, upstream_id{t}, principal_id{t}, credentials from principal_credential",
                    t = $t
                )))
                .fetch_all(&self.$cross)
                .await?;
                rows.into_iter()
                    .map(|(tenant, upstream, principal, sealed)| {
                        Ok((TenantId(uuid(&tenant)?), uuid(&upstream)?, PrincipalId(uuid(&principal)?), sealed))
                    })
                    .collect()
            }

            /// Replaces a sealed value with `new` where it still is `old`: the upstream's
            /// own credentials, or with `principal` that principal's own. Neither the
            /// upstream's revision nor its time moves: what the credentials say is the same.
            pub async fn replace_sealed(
                &self,
                tenant: TenantId,
                upstream: Uuid,
                principal: Option<PrincipalId>,
                old: &[u8],
                new: &[u8],
            ) -> Result<bool, StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                let query = match principal {
                    None => sqlx::query(sql(format!(
                        "update tenant_upstream set credentials = $4 \
                         where tenant_id = $1{u} and upstream_id = $2{u} and $3 = '' and credentials = $5",
                        u = $u
                    ))),
                    Some(_) => sqlx::query(sql(format!(
                        "update principal_credential set credentials = $4 \
                         where tenant_id = $1{u} and upstream_id = $2{u} and principal_id = $3{u} and credentials = $5",
                        u = $u
                    ))),
                };
                let done = query
                    .bind(tenant.to_string())
                    .bind(upstream.to_string())
                    .bind(principal.map(|p| p.to_string()).unwrap_or_default())
                    .bind(new)
                    .bind(old)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(done.rows_affected() == 1)
            }

            /// Every tenant's upstreams' ids and revisions: what an instance checks its
            /// supervisors against (without reading every document each time).
            pub async fn upstream_revisions(&self) -> Result<Vec<(Uuid, i64)>, StoreError> {
                let rows: Vec<(String, i64)> = sqlx::query_as(sql(format!(
                    "select upstream_id{t}, cast(revision as bigint) from tenant_upstream",
                    t = $t
                )))
                .fetch_all(&self.$cross)
                .await?;
                rows.into_iter()
                    .map(|(id, revision)| Ok((uuid(&id)?, revision)))
                    .collect()
            }

            /// One upstream of any tenant, by id.
            pub async fn upstream_by_id(
                &self,
                id: Uuid,
            ) -> Result<Option<UpstreamRecord>, StoreError> {
                let row: Option<Row> = sqlx::query_as(sql(format!(
                    "select {columns} from tenant_upstream where upstream_id = $1{u}",
                    u = $u,
                    columns = Self::upstream_columns()
                )))
                .bind(id.to_string())
                .fetch_optional(&self.$cross)
                .await?;
                row.map(Row::into_record).transpose()
            }
        }
    };
}

upstream_store!(
    PostgresStore,
    owner,
    "::uuid",
    "::jsonb",
    "::text",
    "select pg_advisory_xact_lock(hashtextextended('toolgate.tenant_upstream:' || $1, 0))"
);
upstream_store!(SqliteStore, pool, "", "", "", "select $1 where 0");

impl Store {
    /// Adds a tenant upstream; [`StoreError::Conflict`] when the tenant has one of that
    /// name, or already has `most`.
    pub async fn create_upstream(
        &self,
        tenant: TenantId,
        new: &UpstreamWrite<'_>,
        by: PrincipalId,
        most: usize,
    ) -> Result<UpstreamRecord, StoreError> {
        dispatch!(self, s => s.create_upstream(tenant, new, by, most).await)
    }

    /// The tenant's upstreams, by name.
    pub async fn list_upstreams(
        &self,
        tenant: TenantId,
    ) -> Result<Vec<UpstreamRecord>, StoreError> {
        dispatch!(self, s => s.upstreams(tenant, None).await)
    }

    pub async fn get_upstream(
        &self,
        tenant: TenantId,
        name: &str,
    ) -> Result<Option<UpstreamRecord>, StoreError> {
        let found = dispatch!(self, s => s.upstreams(tenant, Some(name)).await)?;
        Ok(found.into_iter().next())
    }

    /// Replaces the upstream named `name` (its revision grows by one); `None` when the
    /// tenant has none of that name.
    pub async fn update_upstream(
        &self,
        tenant: TenantId,
        name: &str,
        new: &UpstreamWrite<'_>,
    ) -> Result<Option<UpstreamRecord>, StoreError> {
        dispatch!(self, s => s.update_upstream(tenant, name, new).await)
    }

    /// False when the tenant has no upstream of that name.
    pub async fn delete_upstream(&self, tenant: TenantId, name: &str) -> Result<bool, StoreError> {
        dispatch!(self, s => s.delete_upstream(tenant, name).await)
    }
}

/// The upstream seam of [`toolgate_core::stores`], for the MCP crate's tenant-upstream
/// supervisor and principals' own credentials.
#[async_trait::async_trait]
impl toolgate_core::stores::UpstreamStore for Store {
    async fn put_personal_credential(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        principal: PrincipalId,
        sealed: &[u8],
    ) -> Result<(), StoreError> {
        dispatch!(self, s => s.put_personal_credential(tenant, upstream, principal, sealed).await)
    }

    async fn personal_credential(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        principal: PrincipalId,
    ) -> Result<Option<Vec<u8>>, StoreError> {
        dispatch!(self, s => s.personal_credential(tenant, upstream, principal).await)
    }

    async fn delete_personal_credential(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        principal: PrincipalId,
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.delete_personal_credential(tenant, upstream, principal).await)
    }

    async fn personal_credentials(
        &self,
    ) -> Result<Vec<(TenantId, Uuid, PrincipalId, Vec<u8>)>, StoreError> {
        dispatch!(self, s => s.personal_credentials().await)
    }

    async fn replace_sealed(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        principal: Option<PrincipalId>,
        old: &[u8],
        new: &[u8],
    ) -> Result<bool, StoreError> {
        dispatch!(self, s => s.replace_sealed(tenant, upstream, principal, old, new).await)
    }

    /// Every upstream's id and revision, across tenants.
    async fn upstream_revisions(&self) -> Result<Vec<(Uuid, i64)>, StoreError> {
        dispatch!(self, s => s.upstream_revisions().await)
    }

    /// One upstream by id, across tenants.
    async fn upstream_by_id(&self, id: Uuid) -> Result<Option<UpstreamRecord>, StoreError> {
        dispatch!(self, s => s.upstream_by_id(id).await)
    }
}

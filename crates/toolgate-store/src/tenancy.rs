//! Tenants, principals and API keys, on both backends.
//!
//! As for runs and approvals, one macro writes both implementations: ids travel as text
//! and are cast on Postgres, where a tenant's statements run in a transaction naming the
//! tenant (row-level security) and those that span tenants by nature (tenants
//! themselves, finding the key a secret belongs to) on the owner's pool. A revocation is
//! announced the backend's way: `NOTIFY` inside its transaction on Postgres, a signal
//! file replaced once it has committed on SQLite (see [`Store::revocation_signal`]).

use chrono::{DateTime, Utc};
use sqlx::types::Json;
use toolgate_core::{PrincipalId, TenantId};
use uuid::Uuid;

use crate::model::*;
use crate::postgres::PostgresStore;
use crate::sqlite::SqliteStore;
use crate::text::{sql, uuid};
use crate::{Store, StoreError, keys, now};

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

impl KeyMatchRow {
    fn into_model(self) -> Result<KeyMatch, StoreError> {
        let key = self.key.into_model()?;
        let principal = Principal {
            id: key.principal,
            tenant: key.tenant,
            kind: parse_kind(&self.principal_kind),
            name: self.principal_name,
            roles: self.principal_roles.0,
            scopes: self.principal_scopes.0,
            created_at: self.principal_created_at,
        };
        Ok(KeyMatch {
            key,
            principal,
            tenant_name: self.tenant_name,
        })
    }
}

/// The columns of `principal` in [`PrincipalRow`], `t` casting a uuid to text.
fn principal_columns(t: &str) -> String {
    format!(
        "principal_id{t} as principal_id, tenant_id{t} as tenant_id, kind, name, roles, scopes, created_at"
    )
}

/// The columns of `api_key` (as `k` when `k` is `"k."`) in [`KeyRow`].
fn key_columns(k: &str, t: &str) -> String {
    format!(
        "{k}api_key_id{t} as api_key_id, {k}tenant_id{t} as tenant_id, {k}principal_id{t} as principal_id, \
         {k}name, {k}prefix, {k}scopes, {k}expires_at, {k}last_used_at, {k}revoked_at, {k}created_at"
    )
}

/// Whether any API key was revoked since last asked (every instance asks every second):
/// how many are, and the latest revocation, read from `api_key_revoked_idx` alone.
pub(crate) const REVOCATION_MARKER: &str =
    "select count(*), max(revoked_at) from api_key where revoked_at is not null";

/// Writes the tenancy operations for one backend. `$cross`: the pool for statements
/// across tenants; `$once`: the macro running one statement for a tenant (see
/// `sqlite_once`); `$u`: the cast of a text parameter to a uuid; `$t`: of a uuid column
/// to text.
macro_rules! tenancy_store {
    ($store:ty, $cross:ident, $once:ident, $u:literal, $t:literal) => {
        impl $store {
            pub async fn create_tenant(&self, name: &str) -> Result<Tenant, StoreError> {
                let tenant = Tenant {
                    id: TenantId::new(),
                    name: name.to_owned(),
                    created_at: now(),
                };
                let _turn = self.turn().await?;
                sqlx::query(sql(format!(
                    "insert into tenant (tenant_id, name, created_at) values ($1{u}, $2, $3)",
                    u = $u
                )))
                .bind(tenant.id.to_string())
                .bind(&tenant.name)
                .bind(tenant.created_at)
                .execute(&self.$cross)
                .await
                .map_err(|e| {
                    StoreError::on_constraint(e, "tenant_name_key", "a tenant with this name exists")
                })?;
                Ok(tenant)
            }

            pub async fn list_tenants(&self) -> Result<Vec<Tenant>, StoreError> {
                let rows: Vec<TenantRow> = sqlx::query_as(sql(format!(
                    "select tenant_id{t} as tenant_id, name, created_at from tenant order by name",
                    t = $t
                )))
                .fetch_all(&self.$cross)
                .await?;
                rows.into_iter().map(TenantRow::into_model).collect()
            }

            pub async fn get_tenant(&self, tenant: TenantId) -> Result<Option<Tenant>, StoreError> {
                let row: Option<TenantRow> = sqlx::query_as(sql(format!(
                    "select tenant_id{t} as tenant_id, name, created_at from tenant where tenant_id = $1{u}",
                    t = $t,
                    u = $u
                )))
                .bind(tenant.to_string())
                .fetch_optional(&self.$cross)
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
                let insert = sql(format!(
                    "insert into principal (principal_id, tenant_id, kind, name, roles, scopes, created_at) \
                     select $1{u}, $2{u}, $3, $4, $5, $6, $7 \
                     where (select count(*) from principal where tenant_id = $2{u}) < $8",
                    u = $u
                ));
                let most = crate::Quotas::bound(self.limits.quotas.principals);
                let inserted = $once!(self, tenant, write |conn| {
                    sqlx::query(insert)
                        .bind(principal.id.to_string())
                        .bind(tenant.to_string())
                        .bind(kind_str(principal.kind))
                        .bind(&principal.name)
                        .bind(Json(&principal.roles))
                        .bind(Json(&principal.scopes))
                        .bind(principal.created_at)
                        .bind(most)
                        .execute(conn)
                        .await
                        .map_err(|e| {
                            StoreError::on_constraint(e, "principal_tenant_id_name_key", "a principal with this name exists in the tenant")
                        })?
                });
                if inserted.rows_affected() == 0 {
                    return Err(crate::over_quota(
                        most,
                        "principals",
                        "tenant_principals",
                        "a new one needs the operator to raise it",
                    ));
                }
                Ok(principal)
            }

            pub async fn list_principals(&self, tenant: TenantId) -> Result<Vec<Principal>, StoreError> {
                let select = sql(format!(
                    "select {columns} from principal where tenant_id = $1{u} order by name",
                    columns = principal_columns($t),
                    u = $u
                ));
                let rows: Vec<PrincipalRow> = $once!(self, tenant, |conn| {
                    sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .fetch_all(conn)
                        .await?
                });
                rows.into_iter().map(PrincipalRow::into_model).collect()
            }

            pub async fn get_principal(
                &self,
                tenant: TenantId,
                principal: PrincipalId,
            ) -> Result<Option<Principal>, StoreError> {
                let select = sql(format!(
                    "select {columns} from principal where tenant_id = $1{u} and principal_id = $2{u}",
                    columns = principal_columns($t),
                    u = $u
                ));
                let row: Option<PrincipalRow> = $once!(self, tenant, |conn| {
                    sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .bind(principal.0.to_string())
                        .fetch_optional(conn)
                        .await?
                });
                row.map(PrincipalRow::into_model).transpose()
            }

            pub async fn create_api_key(
                &self,
                tenant: TenantId,
                new: &NewApiKey,
            ) -> Result<(ApiKey, String), StoreError> {
                let secret = keys::generate()
                    .map_err(|e| StoreError::Corrupt(format!("no randomness: {e}")))?;
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
                let insert = sql(format!(
                    "insert into api_key (api_key_id, tenant_id, principal_id, name, prefix, secret_hash, scopes, expires_at, created_at) \
                     select $1{u}, $2{u}, $3{u}, $4, $5, $6, $7, $8, $9 \
                     where exists (select 1 from principal where principal_id = $3{u} and tenant_id = $2{u}) \
                     and (select count(*) from api_key where tenant_id = $2{u} and revoked_at is null) < $10",
                    u = $u
                ));
                let most = crate::Quotas::bound(self.limits.quotas.keys);
                let inserted = $once!(self, tenant, write |conn| {
                    sqlx::query(insert)
                        .bind(key.id.to_string())
                        .bind(tenant.to_string())
                        .bind(key.principal.0.to_string())
                        .bind(&key.name)
                        .bind(&key.prefix)
                        .bind(keys::hash(&secret))
                        .bind(Json(&key.scopes))
                        .bind(key.expires_at)
                        .bind(key.created_at)
                        .bind(most)
                        .execute(conn)
                        .await?
                });
                if inserted.rows_affected() == 0 {
                    let count = sql(format!(
                        "select count(*) from api_key where tenant_id = $1{u} and revoked_at is null",
                        u = $u
                    ));
                    let (keys,): (i64,) = $once!(self, tenant, |conn| {
                        sqlx::query_as(count)
                            .bind(tenant.to_string())
                            .fetch_one(conn)
                            .await?
                    });
                    return Err(if keys >= most {
                        crate::over_quota(keys, "keys", "tenant_keys", "revoke some first")
                    } else {
                        StoreError::NotFound("no such principal in this tenant".into())
                    });
                }
                Ok((key, secret))
            }

            pub async fn list_api_keys(&self, tenant: TenantId) -> Result<Vec<ApiKey>, StoreError> {
                let select = sql(format!(
                    "select {columns} from api_key where tenant_id = $1{u} order by created_at",
                    columns = key_columns("", $t),
                    u = $u
                ));
                let rows: Vec<KeyRow> = $once!(self, tenant, |conn| {
                    sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .fetch_all(conn)
                        .await?
                });
                rows.into_iter().map(KeyRow::into_model).collect()
            }

            pub async fn get_api_key(&self, tenant: TenantId, key: Uuid) -> Result<Option<ApiKey>, StoreError> {
                let select = sql(format!(
                    "select {columns} from api_key where tenant_id = $1{u} and api_key_id = $2{u}",
                    columns = key_columns("", $t),
                    u = $u
                ));
                let row: Option<KeyRow> = $once!(self, tenant, |conn| {
                    sqlx::query_as(select)
                        .bind(tenant.to_string())
                        .bind(key.to_string())
                        .fetch_optional(conn)
                        .await?
                });
                row.map(KeyRow::into_model).transpose()
            }

            pub async fn revoke_api_key(&self, tenant: TenantId, key: Uuid) -> Result<bool, StoreError> {
                let mut tx = self.tenant_tx(tenant).await?;
                let done = sqlx::query(sql(format!(
                    "update api_key set revoked_at = coalesce(revoked_at, $3) where tenant_id = $1{u} and api_key_id = $2{u}",
                    u = $u
                )))
                .bind(tenant.to_string())
                .bind(key.to_string())
                .bind(now())
                .execute(&mut *tx)
                .await?;
                let revoked = done.rows_affected() > 0;
                if revoked {
                    self.announce_revocation_in(&mut tx).await?;
                }
                tx.commit().await?;
                if revoked {
                    self.revocation_announced();
                }
                Ok(revoked)
            }

            /// One query: the key, its principal and its tenant's name. Revocation and
            /// expiry are checked by the caller, which knows the time.
            pub async fn find_key(&self, secret: &str) -> Result<Option<KeyMatch>, StoreError> {
                let row: Option<KeyMatchRow> = sqlx::query_as(sql(format!(
                    "select {columns}, p.kind as principal_kind, p.name as principal_name, p.roles as principal_roles, \
                     p.scopes as principal_scopes, p.created_at as principal_created_at, t.name as tenant_name \
                     from api_key k \
                     join principal p on p.principal_id = k.principal_id and p.tenant_id = k.tenant_id \
                     join tenant t on t.tenant_id = k.tenant_id \
                     where k.secret_hash = $1",
                    columns = key_columns("k.", $t)
                )))
                .bind(keys::hash(secret))
                .fetch_optional(&self.$cross)
                .await?;
                row.map(KeyMatchRow::into_model).transpose()
            }

            pub async fn revocation_marker(&self) -> Result<(i64, Option<DateTime<Utc>>), StoreError> {
                Ok(sqlx::query_as(REVOCATION_MARKER)
                .fetch_one(&self.$cross)
                .await?)
            }

            pub async fn touch_key(&self, key: Uuid, at: DateTime<Utc>) -> Result<(), StoreError> {
                let _turn = self.turn().await?;
                sqlx::query(sql(format!(
                    "update api_key set last_used_at = $2 where api_key_id = $1{u}",
                    u = $u
                )))
                .bind(key.to_string())
                .bind(at)
                .execute(&self.$cross)
                .await?;
                Ok(())
            }
        }
    };
}

tenancy_store!(PostgresStore, owner, postgres_once, "::uuid", "::text");
tenancy_store!(SqliteStore, pool, sqlite_once, "", "");

impl Store {
    /// Creates a tenant; its name must match `^[a-z0-9][a-z0-9-]{0,62}$`.
    pub async fn create_tenant(&self, name: &str) -> Result<Tenant, StoreError> {
        if !toolgate_core::auth::is_valid_tenant_name(name) {
            return Err(StoreError::Invalid(format!(
                "tenant name {name:?} is invalid: use 1-63 lowercase letters, digits and dashes, starting with a letter or digit"
            )));
        }
        dispatch!(self, s => s.create_tenant(name).await)
    }

    /// The tenant named `name`.
    pub async fn find_tenant(&self, name: &str) -> Result<Option<Tenant>, StoreError> {
        Ok(self
            .list_tenants()
            .await?
            .into_iter()
            .find(|t| t.name == name))
    }

    pub async fn list_tenants(&self) -> Result<Vec<Tenant>, StoreError> {
        dispatch!(self, s => s.list_tenants().await)
    }

    pub async fn get_tenant(&self, tenant: TenantId) -> Result<Option<Tenant>, StoreError> {
        dispatch!(self, s => s.get_tenant(tenant).await)
    }

    pub async fn create_principal(
        &self,
        tenant: TenantId,
        new: &NewPrincipal,
    ) -> Result<Principal, StoreError> {
        dispatch!(self, s => s.create_principal(tenant, new).await)
    }

    pub async fn list_principals(&self, tenant: TenantId) -> Result<Vec<Principal>, StoreError> {
        dispatch!(self, s => s.list_principals(tenant).await)
    }

    pub async fn get_principal(
        &self,
        tenant: TenantId,
        principal: PrincipalId,
    ) -> Result<Option<Principal>, StoreError> {
        dispatch!(self, s => s.get_principal(tenant, principal).await)
    }

    /// Creates a key; returns it and its secret, which is never stored or shown again.
    pub async fn create_api_key(
        &self,
        tenant: TenantId,
        new: &NewApiKey,
    ) -> Result<(ApiKey, String), StoreError> {
        dispatch!(self, s => s.create_api_key(tenant, new).await)
    }

    pub async fn list_api_keys(&self, tenant: TenantId) -> Result<Vec<ApiKey>, StoreError> {
        dispatch!(self, s => s.list_api_keys(tenant).await)
    }

    /// The tenant's key `key`, revoked or not.
    pub async fn get_api_key(
        &self,
        tenant: TenantId,
        key: Uuid,
    ) -> Result<Option<ApiKey>, StoreError> {
        dispatch!(self, s => s.get_api_key(tenant, key).await)
    }

    pub async fn revoke_api_key(&self, tenant: TenantId, key: Uuid) -> Result<bool, StoreError> {
        dispatch!(self, s => s.revoke_api_key(tenant, key).await)
    }

    /// The key a presented secret belongs to, with its principal and tenant.
    pub async fn find_key(&self, secret: &str) -> Result<Option<KeyMatch>, StoreError> {
        dispatch!(self, s => s.find_key(secret).await)
    }

    /// Changes whenever any key is revoked, in any instance or by the CLI: how many keys
    /// are revoked, and the latest revocation time.
    pub async fn revocation_marker(&self) -> Result<(i64, Option<DateTime<Utc>>), StoreError> {
        dispatch!(self, s => s.revocation_marker().await)
    }

    pub async fn touch_key(&self, key: Uuid, at: DateTime<Utc>) -> Result<(), StoreError> {
        dispatch!(self, s => s.touch_key(key, at).await)
    }
}

//! `/v1/tenants`, `/v1/principals`, `/v1/keys`: tenancy and credentials; `/v1/me`: who
//! the caller is.
//!
//! Creating tenants needs `tenants:manage` (held by the operator's bootstrap admin only).
//! Principals and keys need `tenant:admin` and never reach beyond the caller's tenant; a
//! key never carries a scope its creator lacks.

use axum::extract::State;
use axum::http::StatusCode;
use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};
use serde_json::json;
use toolgate_core::auth::scopes;
use toolgate_core::{PrincipalId, PrincipalKind, ToolError};
use toolgate_store::{ApiKey, NewApiKey, NewPrincipal, Principal, Tenant};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use uuid::Uuid;

use super::changes;
use super::error::{ApiError, Problem};
use super::extract::{AppJson, AppPath};
use crate::auth::{Caller, TENANTS_MANAGE, role_scopes};
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(create_tenant, list_tenants))
        .routes(routes!(create_principal, list_principals))
        .routes(routes!(create_key, list_keys))
        .routes(routes!(revoke_key))
        .routes(routes!(me))
}

/// The caller as the gateway sees it.
#[derive(Debug, Serialize, ToSchema)]
pub struct Me {
    pub tenant_id: Uuid,
    pub tenant: String,
    pub principal_id: Uuid,
    /// Display name (user name, key name).
    pub principal: String,
    pub roles: Vec<String>,
    /// What the caller may do (`audit:read`, `approvals:decide`, `tenant:admin`, …).
    pub scopes: Vec<String>,
}

/// Who the caller is: tenant, principal and scopes (any valid credential). For clients
/// that show only what a key may do (the console).
#[utoipa::path(
    get,
    path = "/v1/me",
    tag = "tenancy",
    responses(
        (status = 200, body = Me, description = "The caller"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn me(caller: Caller) -> AppJson<Me> {
    let auth = &caller.auth;
    AppJson(Me {
        tenant_id: auth.tenant.0,
        tenant: auth.tenant_name.clone(),
        principal_id: auth.principal.id.0,
        principal: auth.principal.name.clone(),
        roles: auth.roles.clone(),
        scopes: auth.scopes.clone(),
    })
}

#[derive(Debug, Serialize, ToSchema)]
pub struct TenantInfo {
    pub id: Uuid,
    pub name: String,
    pub created_at: DateTime<Utc>,
}

impl From<Tenant> for TenantInfo {
    fn from(t: Tenant) -> Self {
        Self {
            id: t.id.0,
            name: t.name,
            created_at: t.created_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub struct PrincipalInfo {
    pub id: Uuid,
    pub kind: PrincipalKindName,
    pub name: String,
    pub roles: Vec<String>,
    pub scopes: Vec<String>,
    pub created_at: DateTime<Utc>,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum PrincipalKindName {
    User,
    ServiceAccount,
}

impl From<Principal> for PrincipalInfo {
    fn from(p: Principal) -> Self {
        Self {
            id: p.id.0,
            kind: match p.kind {
                PrincipalKind::User => PrincipalKindName::User,
                PrincipalKind::ServiceAccount => PrincipalKindName::ServiceAccount,
            },
            name: p.name,
            roles: p.roles,
            scopes: p.scopes,
            created_at: p.created_at,
        }
    }
}

/// An API key as listed: never its secret.
#[derive(Debug, Serialize, ToSchema)]
pub struct KeyInfo {
    pub id: Uuid,
    pub principal_id: Uuid,
    pub name: String,
    /// The key's first characters, to tell keys apart.
    pub prefix: String,
    pub scopes: Vec<String>,
    pub expires_at: Option<DateTime<Utc>>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

impl From<ApiKey> for KeyInfo {
    fn from(k: ApiKey) -> Self {
        Self {
            id: k.id,
            principal_id: k.principal.0,
            name: k.name,
            prefix: k.prefix,
            scopes: k.scopes,
            expires_at: k.expires_at,
            last_used_at: k.last_used_at,
            revoked_at: k.revoked_at,
            created_at: k.created_at,
        }
    }
}

/// A new key with its secret: shown in this response only.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedKey {
    #[serde(flatten)]
    pub key: KeyInfo,
    /// The key itself. Store it now: it is never shown again.
    pub secret: String,
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "acme"}))]
pub struct CreateTenant {
    /// 1–63 lowercase letters, digits and dashes.
    pub name: String,
}

/// A new tenant with its admin principal and the admin's first API key.
#[derive(Debug, Serialize, ToSchema)]
pub struct CreatedTenant {
    pub tenant: TenantInfo,
    pub admin: PrincipalInfo,
    pub admin_key: CreatedKey,
}

/// Create a tenant, its `admin` principal and an admin API key (needs `tenants:manage`).
#[utoipa::path(
    post,
    path = "/v1/tenants",
    tag = "tenancy",
    request_body = CreateTenant,
    responses(
        (status = 201, body = CreatedTenant, description = "Created; the key's secret is shown only here"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "Invalid name"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks tenants:manage"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "A tenant with this name exists"),
        crate::error::Refusals,
    )
)]
async fn create_tenant(
    State(app): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<CreateTenant>,
) -> Result<(StatusCode, AppJson<CreatedTenant>), ApiError> {
    caller.require(TENANTS_MANAGE)?;
    let tenant = app.store.create_tenant(&body.name).await?;
    let (admin, key, secret) =
        crate::bootstrap::create_admin(&app.store, tenant.id, "admin", &[]).await?;
    let change = json!({"tenant_id": tenant.id.0, "name": tenant.name, "admin_id": admin.id.0, "admin_key_id": key.id});
    changes::record_for(&app, &caller, tenant.id, "tenants.create", change).await?;
    let created = CreatedTenant {
        tenant: tenant.into(),
        admin: admin.into(),
        admin_key: CreatedKey {
            key: key.into(),
            secret,
        },
    };
    Ok((StatusCode::CREATED, AppJson(created)))
}

/// List tenants (needs `tenants:manage`).
#[utoipa::path(
    get,
    path = "/v1/tenants",
    tag = "tenancy",
    responses(
        (status = 200, body = Vec<TenantInfo>, description = "Every tenant"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks tenants:manage"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn list_tenants(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<AppJson<Vec<TenantInfo>>, ApiError> {
    caller.require(TENANTS_MANAGE)?;
    Ok(AppJson(
        app.store
            .list_tenants()
            .await?
            .into_iter()
            .map(Into::into)
            .collect(),
    ))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "ci-bot", "kind": "service_account", "roles": ["member"]}))]
pub struct CreatePrincipal {
    /// 1 to 128 bytes.
    #[schema(min_length = 1, max_length = 128)]
    pub name: String,
    #[serde(default = "user")]
    pub kind: PrincipalKindName,
    /// `admin`, `operator`, `member`, or your own (labels that grant nothing); at most
    /// 32, of at most 64 bytes each.
    #[serde(default)]
    #[schema(max_items = 32)]
    pub roles: Vec<String>,
    /// Defaults to the scopes the roles grant. Never more than the creator holds.
    pub scopes: Option<Vec<String>>,
}

fn user() -> PrincipalKindName {
    PrincipalKindName::User
}

/// The longest name of a principal or key.
const MAX_NAME_BYTES: usize = 128;
/// The most roles one principal holds, and the longest role: roles beyond `admin`,
/// `operator` and `member` are the tenant's own labels, stored and shown with every
/// principal, so they are bounded like names.
const MAX_ROLES: usize = 32;
const MAX_ROLE_BYTES: usize = 64;

/// A principal's or key's name: 1 to [`MAX_NAME_BYTES`] bytes.
fn check_name(name: &str) -> Result<(), ApiError> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(ApiError::Malformed(format!(
            "name must have 1 to {MAX_NAME_BYTES} bytes"
        )));
    }
    Ok(())
}

/// The scopes asked for, each once, refused when any exceeds what the caller holds.
fn grantable(caller: &Caller, mut asked: Vec<String>) -> Result<Vec<String>, ApiError> {
    if let Some(extra) = asked.iter().find(|s| !caller.auth.has_scope(s)) {
        return Err(ToolError::forbidden(format!(
            "you cannot grant the scope {extra:?}, which you do not hold"
        ))
        .into());
    }
    asked.sort();
    asked.dedup();
    Ok(asked)
}

/// Create a user or service account in the caller's tenant (needs `tenant:admin`).
#[utoipa::path(
    post,
    path = "/v1/principals",
    tag = "tenancy",
    request_body = CreatePrincipal,
    responses(
        (status = 201, body = PrincipalInfo, description = "Created"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "Malformed body"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks tenant:admin, or grants a scope the caller lacks"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "The name is taken, or the tenant keeps as many principals as it may (`limits.tenant_principals`)"),
        crate::error::Refusals,
    )
)]
async fn create_principal(
    State(app): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<CreatePrincipal>,
) -> Result<(StatusCode, AppJson<PrincipalInfo>), ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    check_name(&body.name)?;
    if body.roles.len() > MAX_ROLES
        || body
            .roles
            .iter()
            .any(|r| r.is_empty() || r.len() > MAX_ROLE_BYTES)
    {
        return Err(ApiError::Malformed(format!(
            "roles: at most {MAX_ROLES}, each of 1 to {MAX_ROLE_BYTES} bytes"
        )));
    }
    let asked = body.scopes.unwrap_or_else(|| {
        let mut all: Vec<String> = body
            .roles
            .iter()
            .flat_map(|r| role_scopes(r))
            .map(|s| s.to_string())
            .collect();
        all.sort();
        all.dedup();
        all
    });
    let scopes = grantable(&caller, asked)?;
    let kind = match body.kind {
        PrincipalKindName::User => PrincipalKind::User,
        PrincipalKindName::ServiceAccount => PrincipalKind::ServiceAccount,
    };
    let new = NewPrincipal {
        kind,
        name: body.name,
        roles: body.roles,
        scopes,
    };
    let principal: PrincipalInfo = app
        .store
        .create_principal(caller.auth.tenant, &new)
        .await?
        .into();
    let change = serde_json::to_value(&principal).unwrap_or_default();
    changes::record(&app, &caller, "principals.create", change).await?;
    Ok((StatusCode::CREATED, AppJson(principal)))
}

/// List the principals of the caller's tenant (needs `tenant:admin`).
#[utoipa::path(
    get,
    path = "/v1/principals",
    tag = "tenancy",
    responses(
        (status = 200, body = Vec<PrincipalInfo>, description = "The tenant's principals"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks tenant:admin"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn list_principals(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<AppJson<Vec<PrincipalInfo>>, ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    let principals = app.store.list_principals(caller.auth.tenant).await?;
    Ok(AppJson(principals.into_iter().map(Into::into).collect()))
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"name": "ci", "principal_id": "01936f0e-8f1c-7a53-9d3e-5c0e0b7e4a21", "scopes": ["tools:invoke"], "expires_in_secs": 2592000}))]
pub struct CreateKey {
    /// 1 to 128 bytes.
    #[schema(min_length = 1, max_length = 128)]
    pub name: String,
    /// Whose key; the caller's own principal when absent.
    pub principal_id: Option<Uuid>,
    /// Defaults to the principal's scopes. Never more than the creator holds.
    pub scopes: Option<Vec<String>>,
    /// Lifetime; no expiry when absent.
    #[schema(minimum = 1)]
    pub expires_in_secs: Option<u64>,
}

/// Create an API key for a principal of the caller's tenant (needs `tenant:admin`).
///
/// The response holds the key's secret; it is stored only as a hash and never shown again.
#[utoipa::path(
    post,
    path = "/v1/keys",
    tag = "tenancy",
    request_body = CreateKey,
    responses(
        (status = 201, body = CreatedKey, description = "Created; the secret is shown only here"),
        (status = 400, body = Problem, content_type = "application/problem+json", description = "Malformed body"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks tenant:admin, or grants a scope the caller lacks"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "No such principal in this tenant"),
        (status = 409, body = Problem, content_type = "application/problem+json", description = "The tenant keeps as many keys as it may (`limits.tenant_keys`)"),
        crate::error::Refusals,
    )
)]
async fn create_key(
    State(app): State<AppState>,
    caller: Caller,
    AppJson(body): AppJson<CreateKey>,
) -> Result<(StatusCode, AppJson<CreatedKey>), ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    check_name(&body.name)?;
    let tenant = caller.auth.tenant;
    let principal_id = body
        .principal_id
        .map(PrincipalId)
        .unwrap_or(caller.auth.principal.id);
    let principal = app
        .store
        .get_principal(tenant, principal_id)
        .await?
        .ok_or_else(|| ToolError::not_found("no such principal in your tenant"))?;
    let scopes = grantable(&caller, body.scopes.unwrap_or(principal.scopes))?;
    let expires_at = match body.expires_in_secs {
        Some(0) => {
            return Err(ApiError::Malformed(
                "expires_in_secs must be at least 1".into(),
            ));
        }
        Some(secs) => Some(
            Utc::now()
                + Duration::seconds(
                    i64::try_from(secs)
                        .unwrap_or(i64::MAX / 1000)
                        .min(100 * 365 * 86400),
                ),
        ),
        None => None,
    };
    let (key, secret) = app
        .store
        .create_api_key(
            tenant,
            &NewApiKey {
                principal: principal.id,
                name: body.name,
                scopes,
                expires_at,
            },
        )
        .await?;
    // The secret is the caller's alone; the row holds the key as listed.
    let key: KeyInfo = key.into();
    let change = serde_json::to_value(&key).unwrap_or_default();
    changes::record(&app, &caller, "keys.create", change).await?;
    Ok((StatusCode::CREATED, AppJson(CreatedKey { key, secret })))
}

/// List the API keys of the caller's tenant, without secrets (needs `tenant:admin`).
#[utoipa::path(
    get,
    path = "/v1/keys",
    tag = "tenancy",
    responses(
        (status = 200, body = Vec<KeyInfo>, description = "The tenant's keys, without secrets"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks tenant:admin"),
        crate::error::Refusals,
        crate::error::ReadRefusals,
    )
)]
async fn list_keys(
    State(app): State<AppState>,
    caller: Caller,
) -> Result<AppJson<Vec<KeyInfo>>, ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    Ok(AppJson(
        app.store
            .list_api_keys(caller.auth.tenant)
            .await?
            .into_iter()
            .map(Into::into)
            .collect(),
    ))
}

/// Revoke an API key of the caller's tenant; it stops working at once (needs `tenant:admin`).
///
/// Work it began stops too: its streams end within seconds, its agent runs are cancelled
/// within 10 s, and calls it asked for can no longer be approved.
#[utoipa::path(
    delete,
    path = "/v1/keys/{id}",
    tag = "tenancy",
    params(("id" = Uuid, Path, description = "Key id")),
    responses(
        (status = 204, description = "Revoked"),
        (status = 403, body = Problem, content_type = "application/problem+json", description = "Lacks tenant:admin"),
        (status = 404, body = Problem, content_type = "application/problem+json", description = "No such key in this tenant"),
        crate::error::Refusals,
    )
)]
async fn revoke_key(
    State(app): State<AppState>,
    caller: Caller,
    AppPath(id): AppPath<Uuid>,
) -> Result<StatusCode, ApiError> {
    caller.require(scopes::TENANT_ADMIN)?;
    if app.store.revoke_api_key(caller.auth.tenant, id).await? {
        app.authenticator.forget_key(id);
        let change = json!({"id": id});
        changes::record(&app, &caller, "keys.revoke", change).await?;
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ToolError::not_found("no such key in your tenant").into())
    }
}

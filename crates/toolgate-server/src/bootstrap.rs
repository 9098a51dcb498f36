//! First start: with an empty store, create the `default` tenant, its admin principal and
//! an admin API key; print the key once and write it to a file only its owner can read.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context;
use toolgate_core::{PrincipalKind, TenantId};
use toolgate_store::{ApiKey, NewApiKey, NewPrincipal, Principal, Store, StoreError};

use crate::auth::{TENANTS_MANAGE, role_scopes};

/// The tenant created on first start.
pub const DEFAULT_TENANT: &str = "default";

/// Creates a tenant's `admin` service account (role `admin`: its scopes, plus `extra`)
/// and its first API key. Returns the principal, the key and the key's secret.
pub async fn create_admin(
    store: &Store,
    tenant: TenantId,
    key_name: &str,
    extra: &[&str],
) -> Result<(Principal, ApiKey, String), StoreError> {
    let scopes: Vec<String> = role_scopes("admin")
        .iter()
        .chain(extra)
        .map(|s| s.to_string())
        .collect();
    let new = NewPrincipal {
        kind: PrincipalKind::ServiceAccount,
        name: "admin".into(),
        roles: vec!["admin".into()],
        scopes: scopes.clone(),
    };
    let admin = store.create_principal(tenant, &new).await?;
    let key = NewApiKey {
        principal: admin.id,
        name: key_name.into(),
        scopes,
        expires_at: None,
    };
    let (key, secret) = store.create_api_key(tenant, &key).await?;
    Ok((admin, key, secret))
}

/// Creates the default tenant and admin key if the store has no tenant yet. Returns the
/// key when it was created now (another instance may have won the race: then `None`).
pub async fn bootstrap(store: &Store, key_file: &Path) -> anyhow::Result<Option<String>> {
    if !store.list_tenants().await?.is_empty() {
        return Ok(None);
    }
    let tenant = match store.create_tenant(DEFAULT_TENANT).await {
        Ok(tenant) => tenant,
        Err(StoreError::Conflict(_)) => return Ok(None),
        Err(err) => return Err(err.into()),
    };
    let (_, _, secret) =
        create_admin(store, tenant.id, "bootstrap admin", &[TENANTS_MANAGE]).await?;
    if let Some(dir) = key_file.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(key_file)
        .with_context(|| format!("writing {}", key_file.display()))?;
    // `mode` applies only when the file is created; an existing file is narrowed too.
    std::fs::set_permissions(
        key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .with_context(|| format!("restricting {}", key_file.display()))?;
    writeln!(file, "{secret}").with_context(|| format!("writing {}", key_file.display()))?;
    Ok(Some(secret))
}

//! First start: with an empty store, create the `default` tenant, its admin principal and
//! an admin API key; print the key once and write it to a file only its owner can read.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::Context;
use toolgate_core::PrincipalKind;
use toolgate_store::{NewApiKey, NewPrincipal, Store, StoreError};

use crate::auth::{TENANTS_MANAGE, role_scopes};

/// The tenant created on first start.
pub const DEFAULT_TENANT: &str = "default";

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
    let mut scopes: Vec<String> = role_scopes("admin").iter().map(|s| s.to_string()).collect();
    scopes.push(TENANTS_MANAGE.into());
    let admin = store
        .create_principal(
            tenant.id,
            &NewPrincipal {
                kind: PrincipalKind::ServiceAccount,
                name: "admin".into(),
                roles: vec!["admin".into()],
                scopes: scopes.clone(),
            },
        )
        .await?;
    let (_, secret) = store
        .create_api_key(
            tenant.id,
            &NewApiKey {
                principal: admin.id,
                name: "bootstrap admin".into(),
                scopes,
                expires_at: None,
            },
        )
        .await?;
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

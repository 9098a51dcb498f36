//! Admin subcommands that work on the configured store directly: `migrate`, `tenants`,
//! `keys`, `audit verify`, `upstreams reseal`, `backup`. They print what they did;
//! secrets only when just created.

use anyhow::{Context, bail};
use clap::Subcommand;
use toolgate_store::{NewApiKey, Store, Tenant};
use uuid::Uuid;

use crate::Config;

#[derive(Debug, Subcommand)]
pub enum TenantsCommand {
    /// Create a tenant.
    Create { name: String },
    /// List tenants.
    List,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create an API key for a principal; prints the key once.
    Create {
        #[arg(long)]
        tenant: String,
        /// Principal name
        #[arg(long)]
        principal: String,
        /// Key name
        #[arg(long, default_value = "cli")]
        name: String,
        /// Scopes (repeat); the principal's scopes when none
        #[arg(long = "scope")]
        scopes: Vec<String>,
    },
    /// List a tenant's keys (never their secrets).
    List {
        #[arg(long)]
        tenant: String,
    },
    /// Revoke a key; it stops working at once.
    Revoke {
        #[arg(long)]
        tenant: String,
        key_id: Uuid,
    },
}

#[derive(Debug, Subcommand)]
pub enum AuditCommand {
    /// Walk a tenant's hash chain and name the first broken row; check it reaches the
    /// stored chain head and every signed checkpoint (the stored ones, and those in
    /// `--checkpoints`, an export kept off the host).
    Verify {
        #[arg(long)]
        tenant: String,
        /// JSON lines from `toolgate audit checkpoints`.
        #[arg(long)]
        checkpoints: Option<std::path::PathBuf>,
        /// A public key (64 hex digits) checkpoints may be signed with; repeat it for
        /// the keys a rotation replaced. Unset: the deployment's, when this host holds
        /// its signing key, and `audit.previous_public_keys`.
        #[arg(long)]
        public_key: Vec<String>,
    },
    /// Print a tenant's signed checkpoints as JSON lines, for keeping off the host.
    Checkpoints {
        #[arg(long)]
        tenant: String,
    },
    /// Print the public half of the deployment's audit signing key and its id.
    PublicKey,
}

#[derive(Debug, Subcommand)]
pub enum UpstreamsCommand {
    /// Seal every stored upstream credential (tenant upstreams' and principals' own)
    /// that a key in `tenant_upstreams.previous_keys` opens again with
    /// `tenant_upstreams.key`. Fails while any credential opens with no configured key
    /// or changed while it ran; once it succeeds, the previous keys can be removed.
    Reseal,
}

/// The configured store, migrated.
pub async fn open_store(config: &Config) -> anyhow::Result<Store> {
    let store = Store::open_with(
        config.database.url.as_ref().map(|u| u.expose()),
        &config.data_dir,
        config.database.limits(),
    )
    .await
    .context("opening the store")?;
    store.migrate().await.context("migrating the store")?;
    Ok(store)
}

async fn tenant(store: &Store, name: &str) -> anyhow::Result<Tenant> {
    store
        .find_tenant(name)
        .await?
        .with_context(|| format!("no tenant named {name:?}"))
}

pub async fn tenants(config: &Config, command: TenantsCommand) -> anyhow::Result<()> {
    let store = open_store(config).await?;
    match command {
        TenantsCommand::Create { name } => {
            let t = store.create_tenant(&name).await?;
            println!("{}\t{}", t.id, t.name);
        }
        TenantsCommand::List => {
            for t in store.list_tenants().await? {
                println!("{}\t{}\t{}", t.id, t.name, t.created_at.to_rfc3339());
            }
        }
    }
    Ok(())
}

pub async fn keys(config: &Config, command: KeysCommand) -> anyhow::Result<()> {
    let store = open_store(config).await?;
    match command {
        KeysCommand::Create {
            tenant: name,
            principal,
            name: key_name,
            scopes,
        } => {
            let t = tenant(&store, &name).await?;
            let p = store
                .list_principals(t.id)
                .await?
                .into_iter()
                .find(|p| p.name == principal)
                .with_context(|| format!("no principal named {principal:?} in tenant {name:?}"))?;
            let scopes = if scopes.is_empty() {
                p.scopes.clone()
            } else {
                scopes
            };
            if let Some(extra) = scopes.iter().find(|s| !p.scopes.contains(s)) {
                bail!("principal {principal:?} does not hold the scope {extra:?}");
            }
            let (key, secret) = store
                .create_api_key(
                    t.id,
                    &NewApiKey {
                        principal: p.id,
                        name: key_name,
                        scopes,
                        expires_at: None,
                    },
                )
                .await?;
            eprintln!("created key {} (shown once):", key.id);
            println!("{secret}");
        }
        KeysCommand::List { tenant: name } => {
            let t = tenant(&store, &name).await?;
            for k in store.list_api_keys(t.id).await? {
                let state = if k.revoked_at.is_some() {
                    "revoked"
                } else {
                    "active"
                };
                println!(
                    "{}\t{}\t{}…\t{}\t{}",
                    k.id,
                    k.name,
                    k.prefix,
                    state,
                    k.scopes.join(",")
                );
            }
        }
        KeysCommand::Revoke {
            tenant: name,
            key_id,
        } => {
            let t = tenant(&store, &name).await?;
            if !store.revoke_api_key(t.id, key_id).await? {
                bail!("no key {key_id} in tenant {name:?}");
            }
            println!("revoked {key_id}");
        }
    }
    Ok(())
}

pub async fn audit(config: &Config, command: AuditCommand) -> anyhow::Result<()> {
    let store = open_store(config).await?;
    match command {
        AuditCommand::PublicKey => {
            let signer = config.audit_signer()?;
            println!("{} {}", signer.public_key_hex(), signer.key_id());
        }
        AuditCommand::Checkpoints { tenant: name } => {
            let t = tenant(&store, &name).await?;
            for cp in store.checkpoints(t.id).await? {
                println!("{}", serde_json::to_string(&cp)?);
            }
        }
        AuditCommand::Verify {
            tenant: name,
            checkpoints,
            public_key,
        } => {
            let t = tenant(&store, &name).await?;
            // The keys named, or the deployment's (when this host holds it) and those
            // it replaced.
            let keys = if public_key.is_empty() {
                config.audit_keys()?
            } else {
                public_key
                    .iter()
                    .map(|hex| {
                        toolgate_store::checkpoint::parse_public_key(hex).with_context(|| {
                            format!("--public-key {hex:?} must be 64 hex digits of an Ed25519 key")
                        })
                    })
                    .collect::<anyhow::Result<_>>()?
            };
            let exported = match checkpoints {
                Some(path) => std::fs::read_to_string(&path)
                    .with_context(|| format!("reading {}", path.display()))?
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(serde_json::from_str)
                    .collect::<Result<Vec<toolgate_store::checkpoint::Checkpoint>, _>>()
                    .with_context(|| {
                        format!("{} must hold checkpoints as JSON lines", path.display())
                    })?,
                None => Vec::new(),
            };
            let rows = store.audit_chain(t.id).await?.len();
            match store.verify_audit(t.id, &keys, &exported).await? {
                None => println!("ok: {rows} rows of tenant {name:?} verify"),
                Some(broken) => bail!("{broken}"),
            }
        }
    }
    Ok(())
}

pub async fn upstreams(config: &Config, command: UpstreamsCommand) -> anyhow::Result<()> {
    match command {
        UpstreamsCommand::Reseal => {
            // Never a new key: one made now would open nothing stored.
            if config.tenant_upstreams.key.is_none() && !config.upstream_key_file().exists() {
                bail!(
                    "no current key: tenant_upstreams.key is unset and {} does not exist",
                    config.upstream_key_file().display()
                );
            }
            let sealer = config.tenant_upstream_settings()?.sealer();
            let store = open_store(config).await?;
            let done = toolgate_mcp::tenant_upstreams::reseal_all(&store, &sealer).await?;
            println!(
                "resealed {} credentials with the current key; {} already were",
                done.resealed, done.current
            );
            for what in &done.unopened {
                eprintln!("opens with no configured key: {what}");
            }
            if done.changed_meanwhile > 0 {
                bail!(
                    "{} credentials changed while this ran: run it again",
                    done.changed_meanwhile
                );
            }
            if !done.unopened.is_empty() {
                bail!(
                    "{} credentials open with no configured key (listed above): keep the previous keys until they are sent again or deleted",
                    done.unopened.len()
                );
            }
        }
    }
    Ok(())
}

/// Writes a consistent copy of the embedded SQLite store to `to`; a Postgres store is
/// refused before it is opened.
pub async fn backup(config: &Config, to: &std::path::Path) -> anyhow::Result<()> {
    if config.database.url.is_some() {
        bail!("{}", Store::POSTGRES_BACKUP);
    }
    open_store(config).await?.backup_to(to).await?;
    println!(
        "wrote {} ({} bytes); the keys in {} are not in it: keep them apart",
        to.display(),
        std::fs::metadata(to).map(|m| m.len()).unwrap_or(0),
        config.data_dir.display()
    );
    Ok(())
}

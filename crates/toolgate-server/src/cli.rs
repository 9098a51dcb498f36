//! Admin subcommands that work on the configured store directly: `migrate`, `tenants`,
//! `keys`, `audit verify`, `audit prune`, `upstreams reseal`, `backup`. They print what they did;
//! secrets only when just created.
//!
//! A tenant made and a key made or revoked here are audited as through the API: one
//! `admin` row in the tenant's chain (recorder `toolgate`, client `toolgate-cli`, and the
//! operating-system user who ran it beside what changed), appended once the change is
//! made; a row that cannot be written fails the command, though the change stands.

use std::io::Write;

use anyhow::{Context, bail};
use clap::Subcommand;
use toolgate_store::{NewApiKey, Store, Tenant};
use uuid::Uuid;

use crate::Config;

/// Checkpoints read at a time by the export.
const CHECKPOINTS_PER_READ: i64 = 1_000;

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
    /// Delete audit rows older than a retention period, for every tenant (or one): each
    /// tenant's rows up to its newest checkpoint signed before the cutoff go, once its
    /// whole chain verifies; that checkpoint becomes the tenant's base, recorded for good,
    /// and `verify` checks the kept rows from it. Fails for a tenant whose chain does not
    /// verify (nothing of it is deleted). Without `--tenant`, also deletes runs that
    /// finished before the cutoff (with their events) and failed-authentication records.
    /// On Postgres, run it with the role that migrates.
    Prune {
        /// Keep this many days of rows (the cutoff is now minus these days).
        #[arg(long, required_unless_present = "before", conflicts_with = "before")]
        older_than_days: Option<u32>,
        /// The cutoff as an RFC 3339 time, instead of `--older-than-days`.
        #[arg(long)]
        before: Option<chrono::DateTime<chrono::Utc>>,
        /// Only this tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// As for `verify`: unset, the deployment's key (this host must hold it) and
        /// `audit.previous_public_keys`.
        #[arg(long)]
        public_key: Vec<String>,
    },
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
    let limits = toolgate_store::StoreLimits {
        quotas: config.limits.quotas(),
        ..config.database.limits()
    };
    let store = Store::open_with(
        config.database.url.as_ref().map(|u| u.expose()),
        &config.data_dir,
        limits,
    )
    .await
    .context("opening the store")?;
    store.migrate().await.context("migrating the store")?;
    Ok(store)
}

/// Records `operation` (with what it named or set, `arguments`) in `tenant`'s audit chain,
/// as the module's doc says.
async fn record_change(
    store: &Store,
    tenant: toolgate_core::TenantId,
    operation: &str,
    mut arguments: serde_json::Value,
) -> anyhow::Result<()> {
    use toolgate_core::audit::AuditRecord;
    let by = toolgate_core::AuthContext::recording_in(tenant, None);
    let mut ctx = toolgate_core::CallContext::new(by, toolgate_core::Adapter::Admin);
    ctx.client = Some(toolgate_core::ClientInfo {
        name: "toolgate-cli".into(),
        version: Some(env!("CARGO_PKG_VERSION").into()),
    });
    // Who ran it, as the operating system says (under sudo, who called sudo).
    let user = ["SUDO_USER", "USER", "LOGNAME"]
        .iter()
        .find_map(|name| std::env::var(name).ok().filter(|u| !u.is_empty()));
    if let (Some(user), Some(fields)) = (user, arguments.as_object_mut()) {
        fields.insert("os_user".into(), user.into());
    }
    // One row, appended as the audit writer appends its batches (a running gateway's
    // writer takes the chain's head from the store, so neither forks it).
    store
        .append_audit(&[AuditRecord::admin_change(&ctx, operation, arguments)])
        .await
        .context("the change is made, but could not be audited")
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
            let change = serde_json::json!({"tenant_id": t.id.0, "name": t.name});
            record_change(&store, t.id, "tenants.create", change).await?;
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
            // The secret is the operator's alone; the row holds the key as listed.
            let change = serde_json::to_value(crate::rest::admin::KeyInfo::from(key))?;
            record_change(&store, t.id, "keys.create", change).await?;
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
            record_change(
                &store,
                t.id,
                "keys.revoke",
                serde_json::json!({"id": key_id}),
            )
            .await?;
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
            // A part at a time: a busy tenant signs half a million a year.
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            let mut after = 0;
            loop {
                let part = store.checkpoints(t.id, after, CHECKPOINTS_PER_READ).await?;
                for cp in &part.items {
                    serde_json::to_writer(&mut out, cp)?;
                    out.write_all(b"\n")?;
                    after = cp.seq;
                }
                if !part.more {
                    break;
                }
            }
            out.flush()?;
        }
        AuditCommand::Verify {
            tenant: name,
            checkpoints,
            public_key,
        } => {
            let t = tenant(&store, &name).await?;
            let keys = verifying_keys(config, &public_key)?;
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
            // The rows kept: from the base to the head (the chain is not read twice).
            let head = store.audit_head(t.id).await?.map_or(0, |(seq, _)| seq);
            let base = store.audit_base(t.id).await?;
            let rows = head - base.as_ref().map_or(0, |b| b.seq);
            let from = match base {
                Some(base) => format!(
                    " (from row {}: rows up to it were pruned at {})",
                    base.seq + 1,
                    base.pruned_at
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ),
                None => String::new(),
            };
            match store.verify_audit(t.id, &keys, &exported).await? {
                None => println!("ok: {rows} rows of tenant {name:?} verify{from}"),
                Some(broken) => bail!("{broken}"),
            }
        }
        AuditCommand::Prune {
            older_than_days,
            before,
            tenant: only,
            public_key,
        } => {
            let keys = verifying_keys(config, &public_key)?;
            if keys.is_empty() {
                bail!(
                    "pruning checks every chain's signed checkpoints first, and no key to check them with is here: \
                     pass --public-key (see `toolgate audit public-key` where the signing key is)"
                );
            }
            let cutoff = match (before, older_than_days) {
                (Some(at), _) => at,
                (None, Some(days)) => chrono::Utc::now() - chrono::Duration::days(i64::from(days)),
                (None, None) => bail!("--older-than-days or --before is required"),
            };
            let tenants = match &only {
                Some(name) => vec![tenant(&store, name).await?],
                None => store.list_tenants().await?,
            };
            let mut refused = 0;
            for t in tenants {
                let done = store.prune_audit(t.id, cutoff, &keys).await?;
                let name = &t.name;
                match (&done.refused, done.base) {
                    (Some(broken), _) => {
                        refused += 1;
                        eprintln!(
                            "tenant {name:?}: not pruned, its chain does not verify: {broken}"
                        );
                    }
                    (None, None) => println!(
                        "tenant {name:?}: nothing to prune (no checkpoint signed before {})",
                        cutoff.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                    ),
                    (None, Some(base)) => println!(
                        "tenant {name:?}: {} rows and {} checkpoints deleted; {}; the chain verifies from row {}",
                        done.deleted,
                        done.checkpoints,
                        if done.moved {
                            format!("pruned up to checkpoint {base}")
                        } else {
                            format!("already pruned up to checkpoint {base}")
                        },
                        base + 1
                    ),
                }
            }
            // The rest of the past, across tenants: only when every tenant was asked.
            if only.is_none() {
                let history = store.prune_history(cutoff).await?;
                println!(
                    "{} finished runs deleted (with their events); {} settled approvals deleted; {} failed-authentication records deleted",
                    history.runs, history.approvals, history.security_events
                );
            }
            if refused > 0 {
                bail!("{refused} tenant(s) not pruned: their chains do not verify (see above)");
            }
        }
    }
    Ok(())
}

/// The keys checkpoints' signatures are checked against: those named, or the
/// deployment's (when this host holds it) and those it replaced.
fn verifying_keys(
    config: &Config,
    named: &[String],
) -> anyhow::Result<Vec<toolgate_store::checkpoint::VerifyingKey>> {
    if named.is_empty() {
        return config.audit_keys();
    }
    named
        .iter()
        .map(|hex| {
            toolgate_store::checkpoint::parse_public_key(hex).with_context(|| {
                format!("--public-key {hex:?} must be 64 hex digits of an Ed25519 key")
            })
        })
        .collect()
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

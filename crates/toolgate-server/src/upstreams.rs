//! Tenants' own upstream MCP servers (`/v1/upstreams`): their credentials sealed at rest,
//! where they may connect vetted, and each instance's connections kept in step with the
//! store.
//!
//! - Credentials (static headers, a bearer token) are sealed with ChaCha20-Poly1305
//!   under the configured key, bound to the tenant, name and URL (the associated data):
//!   a sealed value copied to another row, tenant or URL does not open. They go nowhere
//!   but to the upstream's URL: the API shows header names and whether a token is set,
//!   and logs never carry them (`UpstreamTransport`'s `Debug` hides them).
//! - HTTP only. The URL is `https://` (`http://` only when configured); a literal host
//!   address must be public or in `allowed_networks`, and a host name is resolved by
//!   [`VettedResolver`] at every connection, which refuses the name when any address is
//!   not, and hands the client exactly the addresses it vetted: no second lookup, so no
//!   rebinding window. Redirects are not followed; proxies are not used.
//! - Their tools are registered for their tenant only ([`Owner::Tenant`]).
//! - An upstream may instead be an HTTP API described by an OpenAPI 3.x document (or one
//!   endpoint with a JSON Schema): its operations become tools
//!   ([`toolgate_tools::http_api`]) calling the upstream's URL with the same client,
//!   credentials and guard; nothing to connect, so it is `ready` as soon as it starts.
//! - Every instance supervises every tenant upstream: a change made here applies at once,
//!   one made on another instance within `sync_secs`.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ring::aead::{Aad, CHACHA20_POLY1305, LessSafeKey, NONCE_LEN, Nonce, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use toolgate_core::{Owner, Registry, TenantId};
use toolgate_mcp::catalog::Catalog;
use toolgate_mcp::upstream::{self, Status, UpstreamConfig, UpstreamTransport};
use toolgate_store::{Store, StoreError, UpstreamRecord};
use uuid::Uuid;

use crate::config::Config;

/// Sealed values start with this version byte.
const SEALED_V1: u8 = 1;

/// The longest a stopping supervisor may take to unregister its tools.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What a tenant upstream is, as stored: everything but the credentials.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stored {
    pub url: String,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    pub timeout_secs: u64,
    pub max_timeout_secs: u64,
    /// Each progress report moves a call's deadline to at least this long from then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress_extends_ms: Option<u64>,
    /// The names of the static headers (their values are sealed).
    #[serde(default)]
    pub header_names: Vec<String>,
    /// Whether a bearer token is set (it is sealed).
    #[serde(default)]
    pub bearer: bool,
    /// For an HTTP API rather than an MCP server: its OpenAPI 3.x document (an endpoint's
    /// is generated, see [`toolgate_tools::http_api::endpoint_document`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub openapi: Option<serde_json::Value>,
    /// Per tool at the upstream: another name, description, fixed and default arguments.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, toolgate_mcp::upstream::ToolOverride>,
    /// Calls go out with each caller's own credential ([`Personals`]); the upstream's
    /// own only lists its tools.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub personal: bool,
}

/// How long a principal's own credential, once read, is used before it is read again
/// (a change made on this instance applies at once; on another, within this).
const PERSONAL_CACHE: Duration = Duration::from_secs(5);

/// Principals' own credentials for tenant upstreams that call with them: sealed like the
/// upstream's, bound to the tenant, the upstream's name and URL and the principal (a
/// credential never follows its upstream to another server, nor serves another
/// principal), read through a short cache.
pub struct Personals {
    store: Store,
    sealer: Arc<Sealer>,
    cache: std::sync::Mutex<HashMap<PersonalKey, (Option<Credentials>, std::time::Instant)>>,
}

/// An upstream and a principal.
type PersonalKey = (Uuid, toolgate_core::PrincipalId);

impl Personals {
    /// The name a principal's credential is sealed under (with the tenant and URL).
    fn sealed_as(upstream: &str, principal: toolgate_core::PrincipalId) -> String {
        format!("{upstream}\0principal\0{principal}")
    }

    /// Stores `principal`'s own credential for upstream `id` (named `name`, at `url`),
    /// sealed; replaces any before.
    pub async fn put(
        &self,
        tenant: TenantId,
        (id, name, url): (Uuid, &str, &str),
        principal: toolgate_core::PrincipalId,
        credentials: &Credentials,
    ) -> anyhow::Result<()> {
        let sealed =
            self.sealer
                .seal(tenant, &Self::sealed_as(name, principal), url, credentials)?;
        self.store
            .put_personal_credential(tenant, id, principal, &sealed)
            .await?;
        self.forget(id, principal);
        Ok(())
    }

    /// Forgets `principal`'s own credential for upstream `id`; whether there was one.
    pub async fn delete(
        &self,
        tenant: TenantId,
        id: Uuid,
        principal: toolgate_core::PrincipalId,
    ) -> Result<bool, StoreError> {
        let removed = self
            .store
            .delete_personal_credential(tenant, id, principal)
            .await?;
        self.forget(id, principal);
        Ok(removed)
    }

    /// Drops what this instance remembers of a principal's credential (changed here).
    fn forget(&self, upstream: Uuid, principal: toolgate_core::PrincipalId) {
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(upstream, principal));
    }

    /// `principal`'s own credential for upstream `upstream` (named `name`, at `url`),
    /// through the cache; `None` when none is stored, or one sealed for another URL.
    pub async fn load(
        &self,
        tenant: TenantId,
        upstream: Uuid,
        name: &str,
        url: &str,
        principal: toolgate_core::PrincipalId,
    ) -> Result<Option<Credentials>, String> {
        let key = (upstream, principal);
        if let Some((credential, at)) = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            && at.elapsed() < PERSONAL_CACHE
        {
            return Ok(credential.clone());
        }
        let sealed = self
            .store
            .personal_credential(tenant, upstream, principal)
            .await
            .map_err(|e| format!("could not read your credential: {e}"))?;
        // One sealed for another URL (the upstream moved) does not open: as if none.
        let credential = sealed.and_then(|sealed| {
            self.sealer
                .open(tenant, &Self::sealed_as(name, principal), url, &sealed)
        });
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key, (credential.clone(), std::time::Instant::now()));
        Ok(credential)
    }
}

/// One upstream's view of [`Personals`].
struct PersonalFor {
    personals: Arc<Personals>,
    upstream: Uuid,
    name: String,
    url: String,
}

#[async_trait::async_trait]
impl toolgate_mcp::upstream::PersonalCredentials for PersonalFor {
    async fn credential(
        &self,
        tenant: TenantId,
        principal: toolgate_core::PrincipalId,
    ) -> Result<Option<toolgate_mcp::upstream::PersonalCredential>, String> {
        Ok(self
            .personals
            .load(tenant, self.upstream, &self.name, &self.url, principal)
            .await?
            .map(|c| toolgate_mcp::upstream::PersonalCredential {
                headers: c.headers,
                bearer: c.bearer,
            }))
    }
}

/// The secret part of a tenant upstream.
#[derive(Clone, Default, Serialize, Deserialize)]
pub struct Credentials {
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub bearer: Option<String>,
}

impl Credentials {
    pub fn is_empty(&self) -> bool {
        self.headers.is_empty() && self.bearer.is_none()
    }
}

/// The configured key, or the key file's, made with a random key (mode 0600) if absent.
pub fn load_key(config: &Config) -> anyhow::Result<[u8; 32]> {
    crate::key_file::load(
        config.tenant_upstreams.key.as_ref(),
        &config.upstream_key_file(),
        "tenant_upstreams.key",
    )
}

/// Seals and opens credentials.
pub struct Sealer {
    key: LessSafeKey,
    random: SystemRandom,
}

impl Sealer {
    pub fn new(key: &[u8; 32]) -> Self {
        let key = UnboundKey::new(&CHACHA20_POLY1305, key).expect("a 32-byte key fits ChaCha20");
        Self {
            key: LessSafeKey::new(key),
            random: SystemRandom::new(),
        }
    }

    fn context(tenant: TenantId, name: &str, url: &str) -> Vec<u8> {
        format!("toolgate upstream credentials\0{tenant}\0{name}\0{url}").into_bytes()
    }

    /// `version || nonce || ciphertext || tag`.
    pub fn seal(
        &self,
        tenant: TenantId,
        name: &str,
        url: &str,
        credentials: &Credentials,
    ) -> anyhow::Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        self.random
            .fill(&mut nonce)
            .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
        let mut body = serde_json::to_vec(credentials)?;
        self.key
            .seal_in_place_append_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(Self::context(tenant, name, url)),
                &mut body,
            )
            .map_err(|_| anyhow::anyhow!("sealing failed"))?;
        let mut sealed = Vec::with_capacity(1 + NONCE_LEN + body.len());
        sealed.push(SEALED_V1);
        sealed.extend_from_slice(&nonce);
        sealed.extend_from_slice(&body);
        Ok(sealed)
    }

    /// `None` when the value was sealed under another key, or for another tenant, name
    /// or URL, or was altered.
    pub fn open(
        &self,
        tenant: TenantId,
        name: &str,
        url: &str,
        sealed: &[u8],
    ) -> Option<Credentials> {
        let (&version, rest) = sealed.split_first()?;
        if version != SEALED_V1 || rest.len() < NONCE_LEN {
            return None;
        }
        let (nonce, body) = rest.split_at(NONCE_LEN);
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut body = body.to_vec();
        let plain = self
            .key
            .open_in_place(
                nonce,
                Aad::from(Self::context(tenant, name, url)),
                &mut body,
            )
            .ok()?;
        serde_json::from_slice(plain).ok()
    }
}

/// Where tenants' upstreams may connect.
#[derive(Clone, Debug, Default)]
pub struct Reach {
    pub allow_http: bool,
    pub allowed_networks: Vec<ipnet::IpNet>,
    /// Trusted besides the system's roots (`tenant_upstreams.ca_file`).
    pub extra_roots: Vec<reqwest::Certificate>,
}

impl Reach {
    /// Why `url` may not be an upstream's address, if it may not. A host name is checked
    /// at each connection ([`VettedResolver`]); `resolve` checks it now too.
    pub async fn check(&self, url: &str, resolve: bool) -> Result<url::Url, String> {
        let parsed = url::Url::parse(url).map_err(|e| format!("{url:?} is not a URL: {e}"))?;
        match parsed.scheme() {
            "https" => {}
            "http" if self.allow_http => {}
            "http" => return Err("plain http:// is not allowed; use https://".into()),
            other => return Err(format!("{other}: URLs are not allowed; use https://")),
        }
        if !parsed.username().is_empty() || parsed.password().is_some() {
            return Err("credentials in the URL are not allowed; use `headers` or `bearer`".into());
        }
        match parsed.host() {
            Some(url::Host::Ipv4(ip)) => self.vet(&parsed, IpAddr::V4(ip))?,
            Some(url::Host::Ipv6(ip)) => self.vet(&parsed, IpAddr::V6(ip))?,
            Some(url::Host::Domain(name)) if resolve => {
                let port = parsed.port_or_known_default().unwrap_or(443);
                // A name that does not resolve now may later: its connections will tell.
                if let Ok(addrs) = toolgate_tools::resolver::Resolver::system()
                    .lookup(name, port, toolgate_tools::resolver::DEADLINE)
                    .await
                {
                    for addr in addrs {
                        self.vet(&parsed, addr.ip())?;
                    }
                }
            }
            Some(url::Host::Domain(_)) => {}
            None => return Err("the URL has no host".into()),
        }
        Ok(parsed)
    }

    fn vet(&self, url: &url::Url, ip: IpAddr) -> Result<(), String> {
        if toolgate_tools::web_fetch::is_reachable(ip, &self.allowed_networks) {
            return Ok(());
        }
        Err(format!(
            "{} leads to {ip}, which is not a public address",
            url.host_str().unwrap_or("the URL")
        ))
    }

    /// The HTTP client every tenant upstream connects with.
    pub fn client(self: &Arc<Self>) -> anyhow::Result<reqwest::Client> {
        let mut builder = reqwest::Client::builder();
        if !self.extra_roots.is_empty() {
            builder = builder.tls_certs_merge(self.extra_roots.iter().cloned());
        }
        builder
            .dns_resolver(VettedResolver(self.clone()))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("building the tenant upstreams' HTTP client")
    }
}

/// Resolves host names for tenant upstreams, refusing any that resolves to an address
/// that is not public (nor in `allowed_networks`).
struct VettedResolver(Arc<Reach>);

impl reqwest::dns::Resolve for VettedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let reach = self.0.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            // Off the shared blocking pool, under a deadline (see `toolgate_tools::resolver`).
            let addrs: Vec<SocketAddr> = toolgate_tools::resolver::Resolver::system()
                .lookup(&host, 0, toolgate_tools::resolver::DEADLINE)
                .await?;
            if addrs.is_empty() {
                return Err(format!("{host} has no addresses").into());
            }
            if let Some(bad) = addrs
                .iter()
                .find(|a| !toolgate_tools::web_fetch::is_reachable(a.ip(), &reach.allowed_networks))
            {
                return Err(format!(
                    "{host} leads to {}, which is not a public address",
                    bad.ip()
                )
                .into());
            }
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// One tenant upstream on this instance.
struct Running {
    revision: i64,
    link: Link,
}

enum Link {
    Supervised {
        stop: CancellationToken,
        task: tokio::task::JoinHandle<()>,
        status: tokio::sync::watch::Receiver<Status>,
    },
    /// An HTTP API's tools, registered for `tenant`.
    Http { tenant: TenantId, status: Ready },
    /// Could not be started here (e.g. its credentials do not open with this key).
    Failed(String),
}

/// An HTTP API upstream's tools on this instance.
#[derive(Clone, Debug)]
pub struct Ready {
    /// Its tools' names, as the tenant sees them.
    pub tools: Vec<String>,
    /// Operations left out of its document, and tools that could not be registered.
    pub notes: Vec<String>,
    pub since: std::time::SystemTime,
}

/// An upstream's state on this instance, as the API shows it.
#[derive(Clone, Debug)]
pub enum Seen {
    Supervised(Status),
    /// An HTTP API: its tools are registered.
    Ready(Ready),
    Failed(String),
    /// Not (yet) started on this instance.
    Unknown,
}

/// Every tenant upstream this instance supervises.
pub struct TenantUpstreams {
    store: Store,
    registry: Arc<Registry>,
    catalog: Arc<Catalog>,
    pub sealer: Arc<Sealer>,
    pub reach: Arc<Reach>,
    /// Principals' own credentials, for upstreams that call with them.
    pub personals: Arc<Personals>,
    pub client: reqwest::Client,
    /// The operator's upstreams' names, which tenants' may not take.
    pub reserved: Vec<String>,
    pub max_per_tenant: usize,
    pub max_timeout_secs: u64,
    running: std::sync::Mutex<HashMap<Uuid, Running>>,
    /// Vets their tool definitions (pinning).
    vetting: toolgate_mcp::vetting::Vetting,
    /// Held through a whole [`sync`](Self::sync), so an older reading of the store never
    /// lands after a newer one.
    syncing: tokio::sync::Mutex<()>,
    shutdown: CancellationToken,
}

impl TenantUpstreams {
    pub fn new(
        config: &Config,
        store: Store,
        registry: Arc<Registry>,
        catalog: Arc<Catalog>,
        shutdown: CancellationToken,
        vetting: toolgate_mcp::vetting::Vetting,
    ) -> anyhow::Result<Self> {
        let key = load_key(config)?;
        let sealer = Arc::new(Sealer::new(&key));
        let reach = Arc::new(Reach {
            allow_http: config.tenant_upstreams.allow_http,
            allowed_networks: config
                .tenant_upstreams
                .networks()
                .map_err(anyhow::Error::msg)?,
            extra_roots: match &config.tenant_upstreams.ca_file {
                None => Vec::new(),
                Some(path) => {
                    let pem = std::fs::read(path).with_context(|| {
                        format!("reading tenant_upstreams.ca_file {}", path.display())
                    })?;
                    reqwest::Certificate::from_pem_bundle(&pem).with_context(|| {
                        format!(
                            "tenant_upstreams.ca_file {}: not PEM certificates",
                            path.display()
                        )
                    })?
                }
            },
        });
        Ok(Self {
            store: store.clone(),
            registry,
            catalog,
            sealer: sealer.clone(),
            personals: Arc::new(Personals {
                store: store.clone(),
                sealer,
                cache: std::sync::Mutex::default(),
            }),
            client: reach.client()?,
            reach,
            reserved: config.upstreams.iter().map(|u| u.name.clone()).collect(),
            max_per_tenant: config.tenant_upstreams.max_per_tenant,
            max_timeout_secs: config.tenant_upstreams.max_timeout_secs,
            running: std::sync::Mutex::new(HashMap::new()),
            vetting,
            syncing: tokio::sync::Mutex::new(()),
            shutdown,
        })
    }

    /// Brings this instance's supervisors in line with the store: starts new upstreams,
    /// restarts changed ones and stops removed ones.
    pub async fn sync(&self) -> Result<(), StoreError> {
        let _one_at_a_time = self.syncing.lock().await;
        if self.shutdown.is_cancelled() {
            return Ok(());
        }
        // Revisions only: a document (an HTTP API's may be large) is read when it changed.
        let wanted: HashMap<Uuid, i64> =
            self.store.upstream_revisions().await?.into_iter().collect();
        let stale: Vec<Running> = {
            let mut running = self.running();
            let ids: Vec<Uuid> = running
                .iter()
                .filter(|(id, r)| wanted.get(id) != Some(&r.revision))
                .map(|(id, _)| *id)
                .collect();
            ids.iter().filter_map(|id| running.remove(id)).collect()
        };
        // A changed upstream's old tools are gone before its new connection registers.
        for old in stale {
            stop(&self.registry, old).await;
        }
        let missing: Vec<Uuid> = {
            let running = self.running();
            wanted
                .keys()
                .filter(|id| !running.contains_key(id))
                .copied()
                .collect()
        };
        for id in missing {
            // Gone meanwhile: the next sync will not want it either.
            let Some(record) = self.store.upstream_by_id(id).await? else {
                continue;
            };
            self.running()
                .entry(record.id)
                .or_insert_with(|| self.start(&record));
        }
        Ok(())
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, Running>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn start(&self, record: &UpstreamRecord) -> Running {
        let stored: Option<Stored> = serde_json::from_value(record.config.clone()).ok();
        if let Some(document) = stored.as_ref().and_then(|s| s.openapi.as_ref()) {
            let link = match self.http_api(record, document) {
                Ok(status) => Link::Http {
                    tenant: record.tenant,
                    status,
                },
                Err(problem) => {
                    tracing::warn!(tenant = %record.tenant, upstream = %record.name, %problem, "cannot start a tenant HTTP API");
                    Link::Failed(problem)
                }
            };
            return Running {
                revision: record.revision,
                link,
            };
        }
        let link = match self.upstream_config(record) {
            Ok(config) => {
                let stop = self.shutdown.child_token();
                let supervised = upstream::spawn(
                    config,
                    self.registry.clone(),
                    self.catalog.clone(),
                    stop.clone(),
                );
                Link::Supervised {
                    stop,
                    task: supervised.task,
                    status: supervised.status,
                }
            }
            Err(problem) => {
                tracing::warn!(tenant = %record.tenant, upstream = %record.name, %problem, "cannot start a tenant upstream");
                Link::Failed(problem)
            }
        };
        Running {
            revision: record.revision,
            link,
        }
    }

    /// Registers the tools of an HTTP API upstream for its tenant.
    fn http_api(
        &self,
        record: &UpstreamRecord,
        document: &serde_json::Value,
    ) -> Result<Ready, String> {
        let config = self.upstream_config(record)?;
        let UpstreamTransport::Http {
            url,
            headers,
            bearer,
            ..
        } = &config.transport
        else {
            return Err("an HTTP API upstream needs an http(s) URL".into());
        };
        let api = Arc::new(http_api_of(
            &config,
            url,
            headers,
            bearer.as_deref(),
            &self.client,
        )?);
        let admitted = toolgate_mcp::upstream::admitted(&config.allow, &config.deny)
            .ok_or("an allow or deny glob is invalid")?;
        let parsed =
            toolgate_tools::http_api::tools(document, api, &admitted).map_err(|invalid| {
                let problems: Vec<String> = invalid
                    .0
                    .iter()
                    .map(|(at, why)| format!("{at}: {why}"))
                    .collect();
                format!(
                    "its OpenAPI document cannot be used: {}",
                    problems.join("; ")
                )
            })?;
        let mut notes = parsed.notes;
        let tools = parsed.tools.into_iter().map(|t| t.into_tool()).collect();
        let mut registered = Vec::new();
        for (name, result) in self
            .registry
            .replace(Owner::Tenant(record.tenant), &[], tools)
        {
            match result {
                Ok(()) => registered.push(name),
                Err(err) => notes.push(format!("{name} not offered: {err}")),
            }
        }
        registered.sort();
        Ok(Ready {
            tools: registered,
            notes,
            since: std::time::SystemTime::now(),
        })
    }

    fn upstream_config(&self, record: &UpstreamRecord) -> Result<UpstreamConfig, String> {
        let stored: Stored = serde_json::from_value(record.config.clone())
            .map_err(|e| format!("its stored configuration is unreadable: {e}"))?;
        let credentials = match &record.credentials {
            None => Credentials::default(),
            Some(sealed) => self
                .sealer
                .open(record.tenant, &record.name, &stored.url, sealed)
                .ok_or(
                    "its credentials do not open with this gateway's key (tenant_upstreams.key)",
                )?,
        };
        let personal_url = stored.url.clone();
        Ok(UpstreamConfig {
            name: record.name.clone(),
            prefix: stored.prefix,
            transport: UpstreamTransport::Http {
                url: stored.url,
                headers: credentials.headers,
                bearer: credentials.bearer,
                client: Some(self.client.clone()),
            },
            allow: stored.allow,
            deny: stored.deny,
            default_timeout: Duration::from_secs(stored.timeout_secs),
            max_timeout: Duration::from_secs(stored.max_timeout_secs),
            progress_extends: stored.progress_extends_ms.map(Duration::from_millis),
            owner: Owner::Tenant(record.tenant),
            // Only this tenant's calls share the connection: a log message or request
            // the transport does not tie to a call may go to its only call in flight.
            relay_unattributed: true,
            // A tenant's own upstream serves that tenant alone: its one session is it.
            sessions: toolgate_mcp::upstream::SessionScope::Shared,
            // The tenant's policy says.
            pin: None,
            vetting: self.vetting.clone(),
            overrides: stored.overrides,
            personal: toolgate_mcp::upstream::Personal(stored.personal.then(|| {
                Arc::new(PersonalFor {
                    personals: self.personals.clone(),
                    upstream: record.id,
                    name: record.name.clone(),
                    url: personal_url,
                }) as Arc<dyn toolgate_mcp::upstream::PersonalCredentials>
            })),
        })
    }

    /// What this instance sees of upstream `id`.
    pub fn seen(&self, id: Uuid) -> Seen {
        match self.running().get(&id).map(|r| &r.link) {
            Some(Link::Supervised { status, .. }) => Seen::Supervised(status.borrow().clone()),
            Some(Link::Http { status, .. }) => Seen::Ready(status.clone()),
            Some(Link::Failed(problem)) => Seen::Failed(problem.clone()),
            None => Seen::Unknown,
        }
    }

    /// Syncs every `every` until `shutdown`, then stops every supervisor.
    pub async fn supervise(self: Arc<Self>, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => break,
                _ = tick.tick() => {
                    if let Err(err) = self.sync().await {
                        tracing::warn!(error = %err, "could not read tenant upstreams from the store");
                    }
                }
            }
        }
        let _no_more_syncs = self.syncing.lock().await;
        let all: Vec<Running> = self.running().drain().map(|(_, r)| r).collect();
        for running in all {
            stop(&self.registry, running).await;
        }
    }
}

/// Ends a supervisor and waits (briefly) for it to unregister its tools; removes an HTTP
/// API's tools.
async fn stop(registry: &Registry, running: Running) {
    match running.link {
        Link::Supervised { stop, task, .. } => {
            stop.cancel();
            let _ = tokio::time::timeout(STOP_GRACE, task).await;
        }
        Link::Http { tenant, status } => {
            for name in &status.tools {
                registry.unregister(Owner::Tenant(tenant), name);
            }
        }
        Link::Failed(_) => {}
    }
}

/// How an HTTP API upstream's tools reach it: its URL, credentials as headers, the
/// tenant upstreams' guarded client.
fn http_api_of(
    config: &UpstreamConfig,
    url: &str,
    headers: &BTreeMap<String, String>,
    bearer: Option<&str>,
    client: &reqwest::Client,
) -> Result<toolgate_tools::http_api::HttpApi, String> {
    let base = url::Url::parse(url).map_err(|e| format!("its URL is invalid: {e}"))?;
    let mut sent = reqwest::header::HeaderMap::new();
    for (name, value) in headers {
        let name = reqwest::header::HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| format!("header {name:?} is not a header name"))?;
        let value = reqwest::header::HeaderValue::from_str(value)
            .map_err(|_| format!("header {name} has an invalid value"))?;
        sent.insert(name, value);
    }
    if let Some(token) = bearer {
        let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| "the bearer token is not a valid header value".to_owned())?;
        value.set_sensitive(true);
        sent.insert(reqwest::header::AUTHORIZATION, value);
    }
    Ok(toolgate_tools::http_api::HttpApi {
        base,
        headers: sent,
        client: client.clone(),
        prefix: config.prefix(),
        default_timeout: config.default_timeout,
        max_timeout: config.max_timeout,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials() -> Credentials {
        Credentials {
            headers: [("x-api-key".to_owned(), "hunter2".to_owned())].into(),
            bearer: Some("s3cr3t".into()),
        }
    }

    #[test]
    fn sealed_credentials_open_only_for_their_tenant_name_url_and_key() {
        let sealer = Sealer::new(&[7; 32]);
        let (tenant, other) = (TenantId(Uuid::now_v7()), TenantId(Uuid::now_v7()));
        let url = "https://mcp.example.com/mcp";
        let sealed = sealer
            .seal(tenant, "docs", url, &credentials())
            .expect("seal");
        assert!(!String::from_utf8_lossy(&sealed).contains("hunter2"));
        let opened = sealer.open(tenant, "docs", url, &sealed).expect("opens");
        assert_eq!(opened.headers["x-api-key"], "hunter2");
        assert_eq!(opened.bearer.as_deref(), Some("s3cr3t"));
        assert!(sealer.open(other, "docs", url, &sealed).is_none());
        assert!(sealer.open(tenant, "wiki", url, &sealed).is_none());
        assert!(
            sealer
                .open(tenant, "docs", "https://evil.example/mcp", &sealed)
                .is_none()
        );
        assert!(
            Sealer::new(&[8; 32])
                .open(tenant, "docs", url, &sealed)
                .is_none()
        );
        let mut altered = sealed.clone();
        *altered.last_mut().expect("bytes") ^= 1;
        assert!(sealer.open(tenant, "docs", url, &altered).is_none());
        // Two seals of the same credentials differ (a fresh nonce each).
        assert_ne!(
            sealed,
            sealer
                .seal(tenant, "docs", url, &credentials())
                .expect("seal")
        );
    }

    #[tokio::test]
    async fn upstream_urls_reach_only_public_addresses_over_https() {
        let reach = Reach::default();
        for url in [
            "http://mcp.example.com/mcp",
            "ftp://mcp.example.com/",
            "https://user:pw@mcp.example.com/mcp",
            "https://127.0.0.1/mcp",
            "https://2130706433/mcp",
            "https://0x7f.1/mcp",
            "https://[::1]/mcp",
            "https://[::ffff:127.0.0.1]/mcp",
            "https://169.254.169.254/latest/meta-data",
            "https://10.0.0.8/mcp",
            "https://0.0.0.0/mcp",
            "https://[fd00::1]/mcp",
            "https://localhost/mcp",
            "not a url",
        ] {
            assert!(
                reach.check(url, true).await.is_err(),
                "{url} must be refused"
            );
        }
        assert!(reach.check("https://93.184.215.14/mcp", true).await.is_ok());
        let tests = Reach {
            allow_http: true,
            allowed_networks: vec!["127.0.0.0/8".parse().expect("net")],
            ..Reach::default()
        };
        assert!(tests.check("http://127.0.0.1:9/mcp", true).await.is_ok());
        assert!(tests.check("http://10.0.0.8/mcp", true).await.is_err());
    }

    #[tokio::test]
    async fn the_client_refuses_names_that_resolve_to_private_addresses() {
        let reach = Arc::new(Reach::default());
        let client = reach.client().expect("client");
        let err = client
            .get("http://localhost:9/mcp")
            .send()
            .await
            .expect_err("refused");
        let chain = toolgate_core::error::chain(&err);
        assert!(chain.contains("not a public address"), "{chain}");
    }
}

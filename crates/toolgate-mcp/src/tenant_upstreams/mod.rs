//! Tenants' own upstream MCP servers (`/v1/upstreams`): their credentials sealed at rest,
//! where they may connect vetted, and each instance's connections kept in step with the
//! store.
//!
//! - Credentials (static headers, a bearer token) are sealed ([`sealing`]). They go
//!   nowhere but to the upstream's URL: the API shows header names and whether a token
//!   is set, and logs never carry them (`UpstreamTransport`'s `Debug` hides them).
//! - HTTP only, to vetted addresses ([`toolgate_tools::egress`], as `web_fetch`).
//! - Their tools are registered for their tenant only ([`Owner::Tenant`]).
//! - An upstream may instead be an HTTP API described by an OpenAPI 3.x document (or one
//!   endpoint with a JSON Schema): its operations become tools
//!   ([`toolgate_tools::http_api`]) calling the upstream's URL with the same client,
//!   credentials and guard; nothing to connect, so it is `ready` as soon as it starts.
//! - Every instance supervises every tenant upstream: a change made here applies at once,
//!   one made on another instance within `sync_secs`.

pub mod sealing;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use toolgate_core::stores::{UpstreamRecord, UpstreamStore};
use toolgate_core::{Owner, Registry, TenantId};
use toolgate_tools::egress::Egress;
use uuid::Uuid;

pub use sealing::{Credentials, Personals, Resealed, Rotation, Sealer, reseal_all};

use crate::catalog::Catalog;
use crate::upstream::{self, Status, UpstreamConfig, UpstreamTransport};
use sealing::PersonalFor;

/// The longest a stopping supervisor may take to unregister its tools.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// What a tenant upstream is, as stored: everything but the credentials.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UpstreamSettings {
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
    pub overrides: BTreeMap<String, upstream::ToolOverride>,
    /// Calls go out with each caller's own credential ([`Personals`]); the upstream's
    /// own only lists its tools.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub personal: bool,
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

/// What the operator set for tenants' upstreams (`[tenant_upstreams]`), as the
/// supervisor needs it. Its `Debug` leaves the keys out.
#[derive(Clone)]
pub struct Settings {
    /// The key credentials are sealed with (shared by every instance).
    pub key: [u8; 32],
    /// Keys being rotated out: what they sealed still opens.
    pub previous_keys: Vec<[u8; 32]>,
    pub allow_http: bool,
    pub allowed_networks: Vec<ipnet::IpNet>,
    /// PEM certificates trusted besides the system's roots.
    pub ca_file: Option<PathBuf>,
    /// The operator's upstreams' names, which tenants' may not take.
    pub reserved: Vec<String>,
    pub max_per_tenant: usize,
    pub max_timeout_secs: u64,
}

impl Settings {
    /// What seals with `key` and opens with it or `previous_keys`.
    pub fn sealer(&self) -> Sealer {
        Sealer::rotating(&self.key, &self.previous_keys)
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settings")
            .field("key", &"***")
            .field("previous_keys", &self.previous_keys.len())
            .field("allow_http", &self.allow_http)
            .field("allowed_networks", &self.allowed_networks)
            .field("ca_file", &self.ca_file)
            .field("reserved", &self.reserved)
            .field("max_per_tenant", &self.max_per_tenant)
            .field("max_timeout_secs", &self.max_timeout_secs)
            .finish()
    }
}

/// Every tenant upstream this instance supervises.
pub struct TenantUpstreams<S> {
    store: S,
    registry: Arc<Registry>,
    catalog: Arc<Catalog>,
    pub sealer: Arc<Sealer>,
    /// Where tenants' upstreams may connect (the guard `web_fetch` uses too).
    pub egress: Arc<Egress>,
    /// Principals' own credentials, for upstreams that call with them.
    pub personals: Arc<Personals<S>>,
    pub client: reqwest::Client,
    /// The operator's upstreams' names, which tenants' may not take.
    pub reserved: Vec<String>,
    pub max_per_tenant: usize,
    pub max_timeout_secs: u64,
    running: std::sync::Mutex<HashMap<Uuid, Running>>,
    /// Vets their tool definitions (pinning).
    vetting: crate::vetting::Vetting,
    /// Held through a whole [`sync`](Self::sync), so an older reading of the store never
    /// lands after a newer one.
    syncing: tokio::sync::Mutex<()>,
    shutdown: CancellationToken,
}

impl<S: UpstreamStore + Clone> TenantUpstreams<S> {
    pub fn new(
        settings: Settings,
        store: S,
        registry: Arc<Registry>,
        catalog: Arc<Catalog>,
        shutdown: CancellationToken,
        vetting: crate::vetting::Vetting,
    ) -> anyhow::Result<Self> {
        let sealer = Arc::new(settings.sealer());
        let egress = Arc::new(Egress {
            allow_http: settings.allow_http,
            allowed_networks: settings.allowed_networks,
            extra_roots: match &settings.ca_file {
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
            client: egress
                .client()
                .build()
                .context("building the tenant upstreams' HTTP client")?,
            egress,
            reserved: settings.reserved,
            max_per_tenant: settings.max_per_tenant,
            max_timeout_secs: settings.max_timeout_secs,
            running: std::sync::Mutex::new(HashMap::new()),
            vetting,
            syncing: tokio::sync::Mutex::new(()),
            shutdown,
        })
    }

    /// Brings this instance's supervisors in line with the store: starts new upstreams,
    /// restarts changed ones and stops removed ones.
    pub async fn sync(&self) -> Result<(), S::Error> {
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
        let stored: Option<UpstreamSettings> = serde_json::from_value(record.config.clone()).ok();
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
        let admitted = upstream::admitted(&config.allow, &config.deny)
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
        let stored: UpstreamSettings = serde_json::from_value(record.config.clone())
            .map_err(|e| format!("its stored configuration is unreadable: {e}"))?;
        let credentials = match &record.credentials {
            None => Credentials::default(),
            Some(sealed) => self
                .sealer
                .open(record.tenant, &record.name, &stored.url, sealed)
                .ok_or(
                    "its credentials do not open with this gateway's keys (tenant_upstreams.key, previous_keys)",
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
            sessions: upstream::SessionScope::Shared,
            // The tenant's policy says.
            pin: None,
            vetting: self.vetting.clone(),
            overrides: stored.overrides,
            personal: upstream::Personal(stored.personal.then(|| {
                Arc::new(PersonalFor {
                    personals: self.personals.clone(),
                    upstream: record.id,
                    name: record.name.clone(),
                    url: personal_url,
                }) as Arc<dyn upstream::PersonalCredentials>
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

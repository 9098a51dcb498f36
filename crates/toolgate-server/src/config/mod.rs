//! Configuration: defaults → TOML file → `TOOLGATE_*` environment → command-line flags.
//!
//! Nested keys come from the environment with `__` between levels:
//! `TOOLGATE_HTTP__MAX_BODY_BYTES=2097152` sets `http.max_body_bytes`. Values are read as
//! TOML scalars (`true`, `42`, `["a", "b"]`) and fall back to plain strings. The
//! environment arrives through a parameter, never read here, so tests pass their own.
//! Every problem found is reported at once, each named by its key.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

/// The whole configuration. Unknown keys are errors, so typos do not pass silently.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Address the HTTP listener binds.
    pub listen: SocketAddr,
    /// Where toolgate keeps its files (the workspace root by default).
    pub data_dir: PathBuf,
    pub http: HttpConfig,
    pub tools: ToolsConfig,
    pub log: LogConfig,
    pub database: DatabaseConfig,
    pub auth: AuthConfig,
    pub mcp: McpConfig,
    /// Upstream MCP servers whose tools join the registry (operator-wide).
    pub upstreams: Vec<UpstreamEntry>,
    /// Upstream MCP servers tenants add for themselves at `/v1/upstreams`.
    pub tenant_upstreams: TenantUpstreamsConfig,
    /// LLM endpoints agents may use, by name (`[providers.openai]`). Operator-only: an
    /// agent names a provider, never a URL.
    pub providers: BTreeMap<String, ProviderEntry>,
    pub audit: AuditConfig,
    pub limits: LimitsConfig,
    pub telemetry: TelemetryConfig,
    /// Results of idempotent read-only tools kept for a while (`toolgate_core::cache`).
    pub cache: toolgate_core::cache::CacheConfig,
    /// The ops console (`/console`): single sign-on.
    pub console: crate::console::ConsoleConfig,
}

/// `[limits]`: rate and concurrency limits every tenant gets (a tenant's policy may only
/// tighten them), and this instance's capacity (see `toolgate_core::limits`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LimitsConfig {
    /// Calls per minute by each tenant.
    pub tenant_per_minute: Option<u32>,
    /// Calls per minute by each principal.
    pub principal_per_minute: Option<u32>,
    /// Calls per minute of a tool by each tenant, by tool name (`{ execute_command = 30 }`).
    pub tools: BTreeMap<String, u32>,
    /// Calls in flight at once per tenant.
    pub tenant_concurrency: Option<u32>,
    /// REST reads (`GET`) per minute by each principal; more get 429 with `Retry-After`.
    pub principal_reads_per_minute: Option<u32>,
    /// Agent runs one tenant may have going on this instance at once (a paused run waiting
    /// for approval is not going); more starts get 429 with `Retry-After`.
    pub tenant_runs: usize,
    /// Agents one tenant may keep; past it, creating one is refused (409).
    pub tenant_agents: usize,
    /// Principals one tenant may keep.
    pub tenant_principals: usize,
    /// API keys (not revoked) one tenant may keep.
    pub tenant_keys: usize,
    /// Calls of one tenant waiting for a person's approval at once; past it a call that
    /// needs approval is refused (429 with `Retry-After`) instead of asking.
    pub tenant_pending_approvals: usize,
    /// …of one principal.
    pub principal_pending_approvals: usize,
    /// Calls this instance runs at once, all tenants together; more are refused with 503
    /// and `Retry-After` at once.
    pub max_in_flight: usize,
    /// Records waiting for the audit writer at which new calls are refused with 503
    /// (the queue holds `toolgate_store::writer::QUEUE`).
    pub max_audit_backlog: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        let defaults = toolgate_core::limits::AdmissionConfig::default();
        let quotas = toolgate_store::Quotas::default();
        Self {
            tenant_per_minute: None,
            principal_per_minute: None,
            tools: BTreeMap::new(),
            tenant_concurrency: None,
            principal_reads_per_minute: None,
            tenant_runs: DEFAULT_TENANT_RUNS,
            tenant_agents: quotas.agents,
            tenant_principals: quotas.principals,
            tenant_keys: quotas.keys,
            tenant_pending_approvals: quotas.pending_approvals,
            principal_pending_approvals: quotas.pending_approvals_per_principal,
            max_in_flight: defaults.max_in_flight,
            max_audit_backlog: defaults.max_audit_backlog,
        }
    }
}

/// Agent runs one tenant may have going on an instance, unless configured.
pub const DEFAULT_TENANT_RUNS: usize = 64;

impl LimitsConfig {
    /// How many objects one tenant may keep.
    pub fn quotas(&self) -> toolgate_store::Quotas {
        toolgate_store::Quotas {
            agents: self.tenant_agents,
            principals: self.tenant_principals,
            keys: self.tenant_keys,
            pending_approvals: self.tenant_pending_approvals,
            pending_approvals_per_principal: self.principal_pending_approvals,
        }
    }

    pub fn admission(&self) -> toolgate_core::limits::AdmissionConfig {
        toolgate_core::limits::AdmissionConfig {
            defaults: toolgate_core::limits::RateLimits {
                tenant_per_minute: self.tenant_per_minute,
                principal_per_minute: self.principal_per_minute,
                tools: self.tools.clone(),
                tenant_concurrency: self.tenant_concurrency,
            },
            max_in_flight: self.max_in_flight,
            max_audit_backlog: self.max_audit_backlog,
            principal_reads_per_minute: self.principal_reads_per_minute,
        }
    }
}

/// `[audit]`: signed checkpoints of the audit chains (see `toolgate_store::checkpoint`).
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// The Ed25519 key (its 32-byte seed, 64 hex digits) signing checkpoints. Set the same
    /// key on every instance sharing a database (`TOOLGATE_AUDIT__SIGNING_KEY`, from a
    /// secret store). Unset: read from `signing_key_file`, made on first start.
    pub signing_key: Option<Secret>,
    /// `<data_dir>/audit-signing-key` when unset.
    pub signing_key_file: Option<PathBuf>,
    /// Public keys (64 hex digits each, from `toolgate audit public-key`) of signing keys
    /// this deployment used before: checkpoints they signed still verify.
    pub previous_public_keys: Vec<String>,
    /// How often every tenant's chain head is signed, in seconds (only heads that moved).
    /// 0 turns checkpoints off.
    pub checkpoint_secs: u64,
    /// About how many bytes of a call's arguments (as JSON) and of its error a row keeps:
    /// past it, long strings keep their first 1,024 bytes and say how long they were
    /// (`arguments_hash` still names the whole). 0 keeps them whole.
    pub max_argument_bytes: usize,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            signing_key: None,
            signing_key_file: None,
            previous_public_keys: Vec::new(),
            checkpoint_secs: 60,
            max_argument_bytes: 64 * 1024,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthConfig {
    /// Accept JWT bearer tokens (API keys are always accepted).
    pub jwt: Option<crate::jwt::JwtConfig>,
    /// Where the bootstrap admin API key is written on first start; `<data_dir>/admin-api-key`
    /// when unset.
    pub admin_key_file: Option<PathBuf>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DatabaseConfig {
    /// `postgres://…` for Postgres; unset for the embedded SQLite file
    /// `<data_dir>/toolgate.db`. Also read from `DATABASE_URL`.
    pub url: Option<Secret>,
    /// The longest one statement may run or wait for a lock, in milliseconds; then the
    /// request fails with 503 and `Retry-After` (Postgres `statement_timeout` and
    /// `lock_timeout`, SQLite's busy timeout).
    pub statement_timeout_ms: u64,
    /// The longest a request waits for a database connection, in milliseconds.
    pub acquire_timeout_ms: u64,
    /// How many of this instance's database connections one tenant's operations may hold
    /// at once; the next waits for one of its own (at most `acquire_timeout_ms`, then
    /// 503), never for another tenant's.
    pub max_connections_per_tenant: usize,
    /// The instance's pool of database connections; unset: 16 on Postgres, 8 on SQLite.
    pub max_connections: Option<u32>,
    /// How many of the pool all tenants' operations together leave free for sign-ins
    /// (key lookups), sweeps and `/readyz`; unset: a quarter of the pool.
    pub reserved_connections: Option<usize>,
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        let limits = toolgate_store::StoreLimits::default();
        Self {
            url: None,
            statement_timeout_ms: u64::try_from(limits.statement_timeout.as_millis())
                .unwrap_or(5000),
            acquire_timeout_ms: u64::try_from(limits.acquire_timeout.as_millis()).unwrap_or(2000),
            max_connections_per_tenant: limits.per_tenant,
            max_connections: limits.max_connections,
            reserved_connections: limits.reserved,
        }
    }
}

impl DatabaseConfig {
    /// The store's limits from `[database]` (its quotas come from `[limits]`).
    pub fn limits(&self) -> toolgate_store::StoreLimits {
        toolgate_store::StoreLimits {
            statement_timeout: std::time::Duration::from_millis(self.statement_timeout_ms),
            acquire_timeout: std::time::Duration::from_millis(self.acquire_timeout_ms),
            per_tenant: self.max_connections_per_tenant,
            max_connections: self.max_connections,
            reserved: self.reserved_connections,
            ..toolgate_store::StoreLimits::default()
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Largest request body accepted, in bytes; larger bodies get 413.
    pub max_body_bytes: usize,
    /// Origins allowed to call the API from a browser (`["*"]` for any); empty disables CORS.
    pub cors_allowed_origins: Vec<String>,
    /// On shutdown, how long in-flight requests may take to finish, in seconds.
    pub shutdown_grace_secs: u64,
    /// How long a client may take to send a request's head (and an idle keep-alive
    /// connection may wait for its next one), in seconds; then the connection is closed.
    pub header_read_timeout_secs: u64,
    /// How long a client may pause while sending a request body, in seconds.
    pub body_read_timeout_secs: u64,
    /// Client connections open at once; at the cap the one idle longest is closed to
    /// make room. Unset: three quarters of the open-file limit (which the gateway raises
    /// to its hard limit when it starts), less 64, at most 16,384; the rest stays for the
    /// store, upstreams, tools' files and outgoing requests.
    pub max_connections: Option<usize>,
    /// Open SSE streams (approval and run events, MCP session and listen streams) and
    /// `Prefer: wait` REST calls one principal may hold on this instance; one more stream
    /// is 429 with `Retry-After`, one more wait is answered at once.
    pub max_streams_per_principal: usize,
    /// Open SSE streams one tenant's principals may hold together on this instance.
    pub max_streams_per_tenant: usize,
    /// Request body bytes this instance holds at once, counted as they arrive until each
    /// request is answered; a body past it is refused 503 with `Retry-After`. Bodies are
    /// read whole before a call is admitted, so this is what bounds their memory.
    pub max_body_bytes_in_flight: u64,
    /// Request body bytes one tenant's requests hold at once on this instance; a body past
    /// it is refused 429 with `Retry-After` (other tenants' bodies are not).
    pub max_body_bytes_in_flight_per_tenant: u64,
    /// Proxies (addresses or networks, `10.0.0.0/8`) whose `X-Forwarded-For` names the
    /// client: a request from one is counted, logged and recorded as from the client.
    pub trusted_proxies: Vec<String>,
    /// Unknown API keys one client address (an IPv6 /64) may have looked up in a minute;
    /// past it, its keys not recently used are refused 429 with `Retry-After` without a
    /// store lookup. 0: no bound.
    pub unknown_keys_per_minute: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            data_dir: PathBuf::from("toolgate-data"),
            http: HttpConfig::default(),
            tools: ToolsConfig::default(),
            log: LogConfig::default(),
            database: DatabaseConfig::default(),
            auth: AuthConfig::default(),
            mcp: McpConfig::default(),
            upstreams: Vec::new(),
            tenant_upstreams: TenantUpstreamsConfig::default(),
            providers: BTreeMap::new(),
            audit: AuditConfig::default(),
            limits: LimitsConfig::default(),
            telemetry: TelemetryConfig::default(),
            cache: toolgate_core::cache::CacheConfig::default(),
            console: crate::console::ConsoleConfig::default(),
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self {
            max_body_bytes: 1024 * 1024,
            cors_allowed_origins: Vec::new(),
            shutdown_grace_secs: 10,
            header_read_timeout_secs: 30,
            body_read_timeout_secs: 60,
            max_connections: None,
            max_streams_per_principal: 16,
            max_streams_per_tenant: 256,
            max_body_bytes_in_flight: 128 << 20,
            max_body_bytes_in_flight_per_tenant: 32 << 20,
            trusted_proxies: Vec::new(),
            unknown_keys_per_minute: 60,
        }
    }
}

impl DatabaseConfig {
    /// What is wrong with `[database]`, by key within it.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        if let Some(url) = &self.url
            && !(url.expose().starts_with("postgres://")
                || url.expose().starts_with("postgresql://"))
        {
            problems.push((
                "url".into(),
                "must be a postgres:// URL (unset for embedded SQLite)".into(),
            ));
        }
        for (key, ms) in [
            ("statement_timeout_ms", self.statement_timeout_ms),
            ("acquire_timeout_ms", self.acquire_timeout_ms),
        ] {
            if ms == 0 {
                problems.push((key.into(), "must be at least 1".into()));
            }
        }
        if self.max_connections_per_tenant == 0 {
            problems.push((
                "max_connections_per_tenant".into(),
                "must be at least 1".into(),
            ));
        }
        if self.max_connections == Some(0) {
            problems.push(("max_connections".into(), "must be at least 1".into()));
        }
        let pool = self.limits().pool(match self.url {
            Some(_) => toolgate_store::POSTGRES_POOL,
            None => toolgate_store::SQLITE_POOL,
        });
        if let Some(reserved) = self.reserved_connections
            && reserved >= pool as usize
        {
            problems.push((
                "reserved_connections".into(),
                format!(
                    "must be less than the pool's {pool} connections, leaving tenants at least one"
                ),
            ));
        }
        problems
    }
}

impl HttpConfig {
    /// What is wrong with `[http]`, by key within it.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        for (key, value) in [
            ("max_body_bytes", self.max_body_bytes as u64),
            ("header_read_timeout_secs", self.header_read_timeout_secs),
            ("body_read_timeout_secs", self.body_read_timeout_secs),
        ] {
            if value == 0 {
                problems.push((key.into(), "must be at least 1".into()));
            }
        }
        if self.max_connections == Some(0) {
            problems.push(("max_connections".into(), "must be at least 1".into()));
        }
        // One body of the largest size must fit, or such calls could never be made.
        for (key, value) in [
            ("max_body_bytes_in_flight", self.max_body_bytes_in_flight),
            (
                "max_body_bytes_in_flight_per_tenant",
                self.max_body_bytes_in_flight_per_tenant,
            ),
        ] {
            if value < self.max_body_bytes as u64 {
                problems.push((
                    key.into(),
                    format!(
                        "must be at least max_body_bytes ({}): one body of that size must fit",
                        self.max_body_bytes
                    ),
                ));
            }
        }
        for proxy in &self.trusted_proxies {
            if crate::sources::network(proxy).is_none() {
                problems.push((
                    "trusted_proxies".into(),
                    format!("{proxy:?} is not an address or a network such as 10.0.0.0/8"),
                ));
            }
        }
        for origin in &self.cors_allowed_origins {
            if origin != "*" && axum::http::HeaderValue::from_str(origin).is_err() {
                problems.push((
                    "cors_allowed_origins".into(),
                    format!("{origin:?} is not a valid origin"),
                ));
            }
        }
        problems
    }
}

impl LimitsConfig {
    /// What is wrong with `[limits]`, by key within it.
    pub fn problems(&self) -> Problems {
        let mut problems: Problems = self
            .admission()
            .defaults
            .problems()
            .into_iter()
            .map(|(field, message)| (field.replace('/', "."), message))
            .collect();
        if self.max_in_flight == 0 || self.max_audit_backlog == 0 {
            problems.push((
                String::new(),
                "max_in_flight and max_audit_backlog must be at least 1".into(),
            ));
        }
        if self.principal_reads_per_minute == Some(0) {
            problems.push((
                "principal_reads_per_minute".into(),
                "must be at least 1 (leave it out for no limit)".into(),
            ));
        }
        for (key, value) in [
            ("tenant_runs", self.tenant_runs),
            ("tenant_agents", self.tenant_agents),
            ("tenant_principals", self.tenant_principals),
            ("tenant_keys", self.tenant_keys),
            ("tenant_pending_approvals", self.tenant_pending_approvals),
            (
                "principal_pending_approvals",
                self.principal_pending_approvals,
            ),
        ] {
            if value == 0 {
                problems.push((key.into(), "must be at least 1".into()));
            }
        }
        problems
    }
}

impl AuditConfig {
    /// What is wrong with `[audit]`, by key within it.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        if let Some(key) = &self.signing_key
            && toolgate_core::settings::hex_key(key.expose()).is_none()
        {
            problems.push(("signing_key".into(), "must be 64 hex digits".into()));
        }
        for (i, key) in self.previous_public_keys.iter().enumerate() {
            if toolgate_store::checkpoint::parse_public_key(key).is_none() {
                problems.push((
                    format!("previous_public_keys[{i}]"),
                    "must be an Ed25519 public key, 64 hex digits".into(),
                ));
            }
        }
        problems
    }
}

/// Values given on the command line (each also readable from its own variable by clap).
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub config_file: Option<PathBuf>,
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
}

/// Every problem found in the configuration, each named by its key.
#[derive(Debug)]
pub struct ConfigError(pub Vec<(String, String)>);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "invalid configuration:")?;
        for (key, problem) in &self.0 {
            writeln!(f, "  {key}: {problem}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigError {}

mod load;

pub use crate::telemetry::{LogConfig, LogFormat, TelemetryConfig};
pub use toolgate_agent::config::ProviderEntry;
pub use toolgate_core::settings::{Problems, Secret};
pub use toolgate_mcp::config::{McpConfig, TenantUpstreamsConfig, UpstreamEntry, VendorMetaRule};
pub use toolgate_tools::config::{CommandConfig, FetchConfig, SearchConfig, ToolsConfig};
#[cfg(test)]
mod tests;

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
        Self {
            tenant_per_minute: None,
            principal_per_minute: None,
            tools: BTreeMap::new(),
            tenant_concurrency: None,
            max_in_flight: defaults.max_in_flight,
            max_audit_backlog: defaults.max_audit_backlog,
        }
    }
}

impl LimitsConfig {
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
        }
    }
}

/// `[telemetry]`: metrics (Prometheus at `/metrics`) and their attributes.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Record metrics (on by default). Off: instruments record nothing and `/metrics`
    /// answers 404.
    pub metrics: bool,
    /// Add the tenant id to metric attributes. Off by default: every series is multiplied
    /// by the number of tenants; turn it on only when they are few.
    pub tenant_attributes: bool,
    /// A second listener serving only `GET /metrics`, without credentials (for a
    /// Prometheus scraper inside the deployment's network). On the main listener,
    /// `/metrics` needs the operator scope `tenants:manage`.
    pub metrics_listen: Option<SocketAddr>,
    /// Export spans and metrics over OTLP to this URL: a base URL over HTTP
    /// (`http://collector:4318`), the collector's address over gRPC
    /// (`http://collector:4317`); the standard `OTEL_EXPORTER_OTLP_ENDPOINT` does the same.
    /// Off when neither is set.
    pub otlp_endpoint: Option<String>,
    /// `"http/protobuf"` (the default) or `"grpc"`; the standard
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` (and its per-signal forms) does the same.
    pub otlp_protocol: Option<crate::telemetry::OtlpProtocol>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            metrics: true,
            tenant_attributes: false,
            metrics_listen: None,
            otlp_endpoint: None,
            otlp_protocol: None,
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
    /// How often every tenant's chain head is signed, in seconds (only heads that moved).
    /// 0 turns checkpoints off.
    pub checkpoint_secs: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        Self {
            signing_key: None,
            signing_key_file: None,
            checkpoint_secs: 60,
        }
    }
}

/// One `[providers.<name>]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProviderEntry {
    /// The wire format: `openai` (also OpenRouter, vLLM, llama.cpp, LM Studio),
    /// `anthropic`, `gemini` or `ollama`.
    pub kind: toolgate_agent::ProviderKind,
    /// Taken verbatim: `https://api.openai.com/v1`, `https://openrouter.ai/api/v1`,
    /// `https://api.anthropic.com`, `https://generativelanguage.googleapis.com`,
    /// `http://127.0.0.1:11434`.
    pub base_url: String,
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// The environment variable holding the API key (e.g. `OPENAI_API_KEY`), read at
    /// start-up when `api_key` is unset.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Extra headers on every request (OpenRouter's `HTTP-Referer`, `X-Title`).
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
    /// One attempt's time limit, seconds.
    #[serde(default = "default_provider_timeout")]
    pub timeout_secs: u64,
    /// Retries after the first attempt on 429, 5xx and timeouts.
    #[serde(default = "default_provider_retries")]
    pub max_retries: u32,
    /// First backoff delay (doubled each retry, with jitter), milliseconds.
    #[serde(default = "default_provider_backoff")]
    pub retry_base_ms: u64,
    /// Longest wait between attempts, also capping `Retry-After`, seconds.
    #[serde(default = "default_provider_max_backoff")]
    pub retry_max_secs: u64,
}

fn default_provider_timeout() -> u64 {
    120
}

fn default_provider_retries() -> u32 {
    4
}

fn default_provider_backoff() -> u64 {
    500
}

fn default_provider_max_backoff() -> u64 {
    30
}

impl ProviderEntry {
    /// The provider as `toolgate-agent` takes it.
    pub fn to_provider(&self) -> toolgate_agent::ProviderConfig {
        toolgate_agent::ProviderConfig {
            kind: self.kind,
            base_url: self.base_url.clone(),
            api_key: self.api_key.as_ref().map(|k| k.expose().to_owned()),
            headers: self
                .headers
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                .collect(),
            timeout: std::time::Duration::from_secs(self.timeout_secs),
            retry: toolgate_agent::RetryPolicy {
                max_retries: self.max_retries,
                base_delay: std::time::Duration::from_millis(self.retry_base_ms),
                max_delay: std::time::Duration::from_secs(self.retry_max_secs),
            },
        }
    }
}

/// One `[[upstreams]]` entry: an MCP server over stdio (`command`) or Streamable HTTP
/// (`url`), exactly one of the two.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamEntry {
    /// `^[A-Za-z0-9_.-]{1,32}$`; the default tool prefix is `<name>__`.
    pub name: String,
    /// Put before each of its tools' names; `""` for none.
    #[serde(default)]
    pub prefix: Option<String>,
    /// The program to spawn (stdio), with `args`, in `cwd`, with only `env` (and `PATH`).
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, Secret>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The Streamable HTTP endpoint, with static `headers` and a `bearer` token.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub headers: std::collections::BTreeMap<String, Secret>,
    #[serde(default)]
    pub bearer: Option<Secret>,
    /// Globs over the upstream's tool names: only these (all when empty), never `deny`.
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    /// A call's deadline when the caller asks for none, and the longest allowed, seconds.
    #[serde(default = "default_upstream_timeout")]
    pub timeout_secs: u64,
    #[serde(default = "default_upstream_max_timeout")]
    pub max_timeout_secs: u64,
    /// Each progress report a call makes moves its deadline to at least this long from
    /// then (never past `max_timeout_secs`, nor a deadline the caller asked for);
    /// unset, progress does not extend deadlines.
    #[serde(default)]
    pub progress_extends_ms: Option<u64>,
    /// Relay the upstream's log messages, sampling and elicitation requests that its
    /// transport does not tie to a call (all of them over stdio, log messages over HTTP)
    /// to the one call in flight, when exactly one is. Off by default: every tenant's
    /// calls share this connection, and a message the upstream sends outside any call
    /// would reach whichever caller happens to be alone on it.
    #[serde(default)]
    pub relay_unattributed: bool,
    /// Whose MCP session an HTTP upstream's calls run in: `per_tenant` (the default: what
    /// the upstream keeps per session never crosses tenants), `per_principal`, or
    /// `shared` (one session for everyone). A stdio upstream is one process and one
    /// session, always shared.
    #[serde(default)]
    pub sessions: toolgate_mcp::upstream::SessionScope,
    /// What a changed tool definition (or a description written at the model) does:
    /// `warn` (the default for the operator's own upstreams: taken, and logged as the
    /// `definition.changed` event), `quarantine` (withheld until the operator approves
    /// it at `/v1/tool-definitions`), `off`.
    #[serde(default = "operator_pin")]
    pub pin: toolgate_mcp::vetting::PinMode,
    /// Per tool, by its name at the upstream: `name` (after the prefix), `description`,
    /// `fixed` arguments (hidden from callers, always sent) and `defaults`.
    #[serde(default)]
    pub overrides: BTreeMap<String, toolgate_mcp::upstream::ToolOverride>,
    /// Call this HTTP upstream as each caller: the caller's own JWT is exchanged (RFC
    /// 8693) at `token_url` for a token for the upstream (`audience`, `resource`,
    /// `scope`), the gateway authenticating as `client_id`/`client_secret`. Callers with
    /// an API key cannot call it. Its own `bearer`/`headers`, if any, only list tools.
    #[serde(default)]
    pub token_exchange: Option<toolgate_mcp::upstream::exchange::ExchangeConfig>,
}

fn operator_pin() -> toolgate_mcp::vetting::PinMode {
    toolgate_mcp::vetting::PinMode::Warn
}

fn default_upstream_timeout() -> u64 {
    60
}

fn default_upstream_max_timeout() -> u64 {
    300
}

impl UpstreamEntry {
    /// The upstream as `toolgate-mcp` takes it; `None` when neither or both of `command`
    /// and `url` are set (reported by [`Config::load`]).
    pub fn to_upstream(&self) -> Option<toolgate_mcp::upstream::UpstreamConfig> {
        use toolgate_mcp::upstream::{UpstreamConfig, UpstreamTransport};
        let expose = |m: &std::collections::BTreeMap<String, Secret>| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.expose().to_owned()))
                .collect()
        };
        let transport = match (&self.command, &self.url) {
            (Some(command), None) => UpstreamTransport::Stdio {
                command: command.clone(),
                args: self.args.clone(),
                env: expose(&self.env),
                cwd: self.cwd.clone(),
            },
            (None, Some(url)) => UpstreamTransport::Http {
                url: url.clone(),
                headers: expose(&self.headers),
                bearer: self.bearer.as_ref().map(|b| b.expose().to_owned()),
                client: None,
            },
            _ => return None,
        };
        let personal = match &self.token_exchange {
            None => toolgate_mcp::upstream::Personal::default(),
            Some(exchange) => toolgate_mcp::upstream::Personal(Some(std::sync::Arc::new(
                toolgate_mcp::upstream::exchange::TokenExchange::new(&self.name, exchange.clone()),
            ))),
        };
        Some(UpstreamConfig {
            name: self.name.clone(),
            prefix: self.prefix.clone(),
            transport,
            allow: self.allow.clone(),
            deny: self.deny.clone(),
            default_timeout: std::time::Duration::from_secs(self.timeout_secs),
            max_timeout: std::time::Duration::from_secs(self.max_timeout_secs),
            progress_extends: self
                .progress_extends_ms
                .map(std::time::Duration::from_millis),
            owner: toolgate_core::Owner::Everyone,
            relay_unattributed: self.relay_unattributed,
            sessions: self.sessions,
            pin: Some(self.pin),
            vetting: Default::default(),
            overrides: self.overrides.clone(),
            personal,
        })
    }
}

/// `[tenant_upstreams]`: upstream MCP servers that tenant admins add over REST. HTTP
/// only (a stdio upstream would run a process on the gateway host), reached through the
/// same address checks as `web_fetch`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TenantUpstreamsConfig {
    /// Offer `/v1/upstreams`.
    pub enabled: bool,
    /// The key sealing their credentials at rest: 64 hex digits (32 bytes). Set the same
    /// key on every instance sharing a database (e.g. `TOOLGATE_TENANT_UPSTREAMS__KEY`).
    /// Unset: read from `key_file`, which is made with a random key on first start.
    pub key: Option<Secret>,
    /// `<data_dir>/upstream-credentials-key` when unset.
    pub key_file: Option<PathBuf>,
    /// Accept `http://` URLs (otherwise HTTPS only).
    pub allow_http: bool,
    /// Non-public networks tenants' upstreams may be on, as CIDRs; empty by default:
    /// public addresses only.
    pub allowed_networks: Vec<String>,
    /// CA certificates (PEM) trusted for tenants' upstreams and HTTP APIs besides the
    /// system's: a private CA inside the deployment, or a test CA.
    pub ca_file: Option<PathBuf>,
    /// Most upstreams one tenant may have.
    pub max_per_tenant: usize,
    /// The longest call deadline a tenant may give its upstream, seconds.
    pub max_timeout_secs: u64,
    /// How often each instance reads the store for changes made on other instances,
    /// seconds. A change made on this instance applies at once.
    pub sync_secs: u64,
}

impl Default for TenantUpstreamsConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            key: None,
            key_file: None,
            allow_http: false,
            allowed_networks: Vec::new(),
            ca_file: None,
            max_per_tenant: 16,
            max_timeout_secs: default_upstream_max_timeout(),
            sync_secs: 5,
        }
    }
}

impl TenantUpstreamsConfig {
    pub fn networks(&self) -> Result<Vec<ipnet::IpNet>, String> {
        parse_networks(&self.allowed_networks)
    }
}

/// CIDR networks (or single addresses) from configuration.
fn parse_networks(networks: &[String]) -> Result<Vec<ipnet::IpNet>, String> {
    networks
        .iter()
        .map(|n| {
            n.parse::<ipnet::IpNet>()
                .or_else(|_| n.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("{n:?} is not a CIDR network"))
        })
        .collect()
}

/// The MCP front door at `/mcp`.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// Serve MCP at `/mcp`.
    pub enabled: bool,
    /// `Host` header values accepted at `/mcp` (DNS-rebinding defence): names or
    /// `name:port`. Loopback names by default; set your public host names in production.
    /// `["*"]` accepts any host.
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed at `/mcp` (`https://app.example.com:443`, `http://localhost:*`).
    /// A request carrying any other `Origin` is refused; requests without one (non-browser
    /// clients) pass. Default: loopback origins only.
    pub allowed_origins: Vec<String>,
    /// Keep sessions for clients of protocol versions before 2026-07-28 (which are
    /// stateless anyway). Off serves those clients statelessly too.
    pub sessions: bool,
    /// Authorization servers that issue tokens for this gateway, named in
    /// `/.well-known/oauth-protected-resource` (RFC 9728) for OAuth-capable clients.
    pub authorization_servers: Vec<String>,
    /// This gateway's public base URL (`https://tools.example.com`), used in the
    /// protected-resource metadata; derived from the request's `Host` when unset.
    pub public_url: Option<String>,
    /// Commit every SSE event of a session to the store before sending it, so a client
    /// resumes a broken stream (`Last-Event-ID`) on any instance. Default: on with
    /// Postgres or with SSE polling, otherwise off (one SQLite instance; recent events are
    /// kept in memory).
    pub durable_streams: Option<bool>,
    /// How long stored SSE events are kept for resumption.
    pub event_retention_secs: u64,
    /// Live sessions one principal may hold on this instance; one more `initialize` is
    /// 429 with `Retry-After`.
    pub max_sessions_per_principal: usize,
    /// Live sessions one tenant's principals may hold together on this instance.
    pub max_sessions_per_tenant: usize,
    /// A session with no request and no open stream for this long is let go of from
    /// memory (it stays in the store and is restored if its client comes back), seconds.
    pub session_idle_secs: u64,
    /// A session that holds nothing its `initialize` did not give it (no
    /// `logging/setLevel`, no resource subscription) is let go of sooner: after this long
    /// with no request and no open stream, seconds. Restoring it gives back exactly the
    /// same session, for one replayed handshake (see docs/BENCHMARKS.md for what an idle
    /// session costs in memory).
    pub session_dormant_secs: u64,
    /// A session nobody used for this long is deleted from the store with its events;
    /// its client, coming back, gets 404 and opens a new one (as the MCP specification
    /// has clients do), seconds. Instances note the sessions they hold in memory as in
    /// use about once a minute (at most a quarter of this apart).
    pub session_retention_secs: u64,
    /// SSE polling (SEP-1699): a session request still running after this long has its
    /// POST stream closed, and the client resumes it with `Last-Event-ID` (a GET) after
    /// `sse_retry_ms`; a resumed stream is let go of after as long again. Frees the
    /// connections of long calls behind proxies that cut long-lived responses. Needs the
    /// events in the store (`durable_streams`). Off when unset.
    pub sse_poll_after_ms: Option<u64>,
    /// The `retry` SSE clients are told to wait before reconnecting: in the event that
    /// opens every session request's stream, and in the one that closes it for polling.
    pub sse_retry_ms: u64,
    /// Which clients receive which vendor-specific `_meta` keys of tools and results.
    /// A key goes to a client only when a rule for its prefix names that client.
    pub vendor_meta: Vec<VendorMetaRule>,
}

/// One `mcp.vendor_meta` rule: `_meta` keys starting with `prefix` go to clients whose
/// `clientInfo.name` matches one of `clients` (globs, case-insensitive).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VendorMetaRule {
    pub prefix: String,
    pub clients: Vec<String>,
}

impl McpConfig {
    /// The vendor `_meta` rules, compiled.
    pub fn vendor_meta(&self) -> Result<toolgate_mcp::VendorMeta, String> {
        toolgate_mcp::VendorMeta::new(
            self.vendor_meta
                .iter()
                .map(|r| (r.prefix.clone(), r.clients.iter())),
        )
        .map_err(|e| e.to_string())
    }
}

impl Default for McpConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            // Pages served from this machine itself; a rebinding attack's page has its
            // own origin and is refused.
            allowed_origins: vec![
                "http://localhost:*".into(),
                "http://127.0.0.1:*".into(),
                "http://[::1]:*".into(),
            ],
            sessions: true,
            authorization_servers: Vec::new(),
            public_url: None,
            durable_streams: None,
            event_retention_secs: 3600,
            max_sessions_per_principal: 64,
            max_sessions_per_tenant: 1024,
            session_idle_secs: 300,
            session_dormant_secs: 5,
            session_retention_secs: 24 * 3600,
            sse_poll_after_ms: None,
            sse_retry_ms: 3000,
            // OpenAI's Apps SDK keys (`openai/outputTemplate`, …) for OpenAI's clients.
            vendor_meta: vec![VendorMetaRule {
                prefix: "openai/".into(),
                clients: vec!["openai*".into(), "chatgpt*".into()],
            }],
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

/// A value that must never be printed: its `Debug` shows `***`.
#[derive(Clone, Deserialize, PartialEq, Eq)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
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
}

impl Default for DatabaseConfig {
    fn default() -> Self {
        let limits = toolgate_store::StoreLimits::default();
        Self {
            url: None,
            statement_timeout_ms: u64::try_from(limits.statement_timeout.as_millis())
                .unwrap_or(5000),
            acquire_timeout_ms: u64::try_from(limits.acquire_timeout.as_millis()).unwrap_or(2000),
        }
    }
}

impl DatabaseConfig {
    pub fn limits(&self) -> toolgate_store::StoreLimits {
        toolgate_store::StoreLimits {
            statement_timeout: std::time::Duration::from_millis(self.statement_timeout_ms),
            acquire_timeout: std::time::Duration::from_millis(self.acquire_timeout_ms),
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
    /// Open SSE streams (approval and run events, MCP session streams) one principal may
    /// hold on this instance; one more is 429 with `Retry-After`.
    pub max_streams_per_principal: usize,
    /// Open SSE streams one tenant's principals may hold together on this instance.
    pub max_streams_per_tenant: usize,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ToolsConfig {
    /// Root every file tool is confined to; `<data_dir>/workspace` when unset.
    pub workspace_root: Option<PathBuf>,
    /// Offer the `echo` and `sleep` diagnostic tools.
    pub diagnostics: bool,
    /// Gateway-wide cap on a call's text output, in characters.
    pub max_output_chars: usize,
    /// Arguments whose names match this pattern (Rust regex, matched against the name in
    /// lower snake case: `apiKey` → `api_key`) are masked in audit rows and approvals, in
    /// every tool, beside the fields its schema marks `writeOnly` / `format: password`.
    pub secret_names: String,
    /// The `execute_command` tool and its sandbox.
    pub execute_command: CommandConfig,
    /// The `web_fetch` tool.
    pub web_fetch: FetchConfig,
    /// The `web_search` tool: present only when `url` is set.
    pub web_search: SearchConfig,
}

/// `[tools.web_fetch]`: fetching public web pages.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FetchConfig {
    pub enabled: bool,
    /// Fetch `http://` URLs too (otherwise HTTPS only).
    pub allow_http: bool,
    /// Non-public networks that may still be reached, as CIDRs (`["10.20.0.0/16"]`):
    /// an intranet, or loopback in tests. Empty by default: public addresses only.
    pub allowed_networks: Vec<String>,
    /// Largest body read, in bytes.
    pub max_bytes: usize,
}

impl Default for FetchConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            allow_http: false,
            allowed_networks: Vec::new(),
            max_bytes: toolgate_tools::web_fetch::FetchOptions::default().max_bytes,
        }
    }
}

impl FetchConfig {
    fn networks(&self) -> Result<Vec<ipnet::IpNet>, String> {
        parse_networks(&self.allowed_networks)
    }

    pub fn options(&self) -> Option<toolgate_tools::web_fetch::FetchOptions> {
        self.enabled
            .then(|| toolgate_tools::web_fetch::FetchOptions {
                allow_http: self.allow_http,
                allowed_networks: self.networks().unwrap_or_default(),
                max_bytes: self.max_bytes,
                ..Default::default()
            })
    }
}

/// `[tools.web_search]`: a SearXNG-compatible JSON search API.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SearchConfig {
    /// The search endpoint (`https://searx.example.org/search`); unset leaves the tool out.
    pub url: Option<String>,
    /// Environment variable holding a bearer token for the API, if it needs one.
    pub api_key_env: Option<String>,
}

impl SearchConfig {
    pub fn options(&self) -> Option<toolgate_tools::web_search::SearchOptions> {
        let url = self.url.as_deref()?.parse().ok()?;
        Some(toolgate_tools::web_search::SearchOptions {
            url,
            api_key: self
                .api_key_env
                .as_deref()
                .and_then(|name| std::env::var(name).ok()),
        })
    }
}

/// `[tools.execute_command]`: shell commands in each tenant's workspace, sandboxed.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommandConfig {
    /// Offer the tool (it is high-risk: callers need `tools:high_risk`).
    pub enabled: bool,
    /// `read-only`, `workspace-write` or `unrestricted` (no Landlock).
    pub sandbox: toolgate_tools::SandboxMode,
    /// Per-tenant sandbox, by tenant name (`{ ops = "unrestricted" }`).
    pub tenant_sandbox: BTreeMap<String, toolgate_tools::SandboxMode>,
    /// Run commands without Landlock where the kernel lacks it (otherwise the tool refuses).
    pub allow_unsandboxed: bool,
    /// Let sandboxed commands open TCP connections.
    pub network: bool,
    /// Directories commands may read, beside the tenant's workspace.
    pub read_paths: Vec<PathBuf>,
    /// Deadline when the caller asks for none, and the longest one allowed, in seconds.
    pub default_timeout_secs: u64,
    pub max_timeout_secs: u64,
    /// Address space per process, in MiB.
    pub memory_mb: u64,
    /// CPU time per process, in seconds.
    pub cpu_secs: u64,
    /// Processes of the gateway's user (an rlimit; not enforced for root).
    pub max_processes: u64,
    /// Largest file a command may write, in MiB.
    pub max_file_mb: u64,
    /// Environment variables passed from the gateway to commands (none by default).
    pub env_passthrough: Vec<String>,
    /// The program started as `<launcher> sandbox-exec …` to confine a command; this
    /// `toolgate` binary when unset (set it when embedding the gateway in another program).
    pub launcher: Option<PathBuf>,
}

impl Default for CommandConfig {
    fn default() -> Self {
        let limits = toolgate_tools::ResourceLimits::default();
        let options = toolgate_tools::CommandOptions::default();
        Self {
            enabled: true,
            sandbox: toolgate_tools::SandboxMode::default(),
            tenant_sandbox: BTreeMap::new(),
            allow_unsandboxed: false,
            network: false,
            read_paths: options.read_paths,
            default_timeout_secs: options.default_timeout.as_secs(),
            max_timeout_secs: options.max_timeout.as_secs(),
            memory_mb: limits.memory_bytes >> 20,
            cpu_secs: limits.cpu_secs,
            max_processes: limits.processes,
            max_file_mb: limits.file_bytes >> 20,
            env_passthrough: Vec::new(),
            launcher: None,
        }
    }
}

impl CommandConfig {
    /// The tool's options, or `None` when it is off.
    pub fn options(&self) -> Option<toolgate_tools::CommandOptions> {
        let defaults = toolgate_tools::CommandOptions::default();
        self.enabled.then(|| toolgate_tools::CommandOptions {
            sandbox: self.sandbox,
            tenant_sandbox: self.tenant_sandbox.clone().into_iter().collect(),
            allow_unsandboxed: self.allow_unsandboxed,
            network: self.network,
            read_paths: self.read_paths.clone(),
            limits: toolgate_tools::ResourceLimits {
                memory_bytes: self.memory_mb << 20,
                cpu_secs: self.cpu_secs,
                processes: self.max_processes,
                file_bytes: self.max_file_mb << 20,
            },
            default_timeout: std::time::Duration::from_secs(self.default_timeout_secs),
            max_timeout: std::time::Duration::from_secs(self.max_timeout_secs),
            env_passthrough: self.env_passthrough.clone(),
            launcher: self.launcher.clone().unwrap_or(defaults.launcher),
            temp_root: defaults.temp_root,
        })
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `tracing` filter directives, e.g. `info,toolgate=debug`. `RUST_LOG` overrides it.
    pub filter: String,
    pub format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
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
            max_streams_per_principal: 16,
            max_streams_per_tenant: 256,
        }
    }
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            workspace_root: None,
            diagnostics: true,
            max_output_chars: toolgate_core::spec::DEFAULT_MAX_OUTPUT_CHARS,
            secret_names: toolgate_core::secrets::DEFAULT_SECRET_NAMES.to_owned(),
            execute_command: CommandConfig::default(),
            web_fetch: FetchConfig::default(),
            web_search: SearchConfig::default(),
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            // rmcp logs a few `info` lines for every stateless request and session (service
            // initialized, input stream terminated, serve finished): noise at a gateway, and
            // about 5 µs of a 2026-07-28 call's CPU. Its warnings and errors still show.
            filter: "info,rmcp=warn".to_owned(),
            format: LogFormat::Text,
        }
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

/// `Ok` when `url` is an absolute `http(s)` URL with a host; else what is wrong with it.
pub fn http_url(url: &str) -> Result<(), String> {
    match reqwest::Url::parse(url) {
        Ok(parsed) if matches!(parsed.scheme(), "https" | "http") && parsed.host().is_some() => {
            Ok(())
        }
        Ok(_) => Err(format!("{url:?} is not an http(s) URL")),
        Err(err) => Err(format!("{url:?} is not a URL: {err}")),
    }
}

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
#[cfg(test)]
mod tests;

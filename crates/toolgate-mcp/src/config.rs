//! The MCP crate's configuration sections, each with what is wrong with it: `[mcp]` (the
//! front door at `/mcp`), `[[upstreams]]` (the operator's MCP servers) and
//! `[tenant_upstreams]` (the rules for those tenant admins add).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use toolgate_core::settings::{self, Problems, Secret};

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
    /// A session that holds nothing the store does not keep (its `initialize` and its
    /// `logging/setLevel` choice are kept; a resource subscription is not) is let go of
    /// sooner: after this long with no request and no open stream, seconds. Restoring it
    /// gives back exactly the same session, for one replayed handshake (see
    /// docs/BENCHMARKS.md for what an idle session costs in memory).
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
    pub fn vendor_meta(&self) -> Result<crate::VendorMeta, String> {
        crate::VendorMeta::new(
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
    pub env: BTreeMap<String, Secret>,
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The Streamable HTTP endpoint, with static `headers` and a `bearer` token.
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub headers: BTreeMap<String, Secret>,
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
    pub sessions: crate::upstream::SessionScope,
    /// What a changed tool definition (or a description written at the model) does:
    /// `warn` (the default for the operator's own upstreams: taken, and logged as the
    /// `definition.changed` event), `quarantine` (withheld until the operator approves
    /// it at `/v1/tool-definitions`), `off`.
    #[serde(default = "operator_pin")]
    pub pin: crate::vetting::PinMode,
    /// Per tool, by its name at the upstream: `name` (after the prefix), `description`,
    /// `fixed` arguments (hidden from callers, always sent) and `defaults`.
    #[serde(default)]
    pub overrides: BTreeMap<String, crate::upstream::ToolOverride>,
    /// Call this HTTP upstream as each caller: the caller's own JWT is exchanged (RFC
    /// 8693) at `token_url` for a token for the upstream (`audience`, `resource`,
    /// `scope`), the gateway authenticating as `client_id`/`client_secret`. Callers with
    /// an API key cannot call it. Its own `bearer`/`headers`, if any, only list tools.
    #[serde(default)]
    pub token_exchange: Option<crate::upstream::exchange::ExchangeConfig>,
}

fn operator_pin() -> crate::vetting::PinMode {
    crate::vetting::PinMode::Warn
}

fn default_upstream_timeout() -> u64 {
    60
}

fn default_upstream_max_timeout() -> u64 {
    300
}

impl UpstreamEntry {
    /// The upstream as `toolgate-mcp` takes it; `None` when neither or both of `command`
    /// and `url` are set (reported by [`UpstreamEntry::problems`]).
    pub fn to_upstream(&self) -> Option<crate::upstream::UpstreamConfig> {
        use crate::upstream::{UpstreamConfig, UpstreamTransport};
        let expose = |m: &BTreeMap<String, Secret>| {
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
            None => crate::upstream::Personal::default(),
            Some(exchange) => crate::upstream::Personal(Some(std::sync::Arc::new(
                crate::upstream::exchange::TokenExchange::new(&self.name, exchange.clone()),
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
    /// Keys being rotated out (64 hex digits each): credentials they sealed still open,
    /// new ones are sealed with `key`. `toolgate upstreams reseal` seals what they hold
    /// with `key`; then remove them.
    pub previous_keys: Vec<Secret>,
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
            previous_keys: Vec::new(),
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
        settings::networks(&self.allowed_networks)
    }
}

impl McpConfig {
    /// What is wrong with `[mcp]`, by key within it.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        for (i, server) in self.authorization_servers.iter().enumerate() {
            if let Err(problem) = settings::http_url(server) {
                problems.push(("authorization_servers".into(), format!("[{i}] {problem}")));
            }
        }
        if self.session_retention_secs == 0 {
            problems.push(("session_retention_secs".into(), "must be at least 1".into()));
        }
        if let Err(e) = self.vendor_meta() {
            problems.push(("vendor_meta".into(), e));
        }
        if self.sse_poll_after_ms == Some(0) {
            problems.push((
                "sse_poll_after_ms".into(),
                "must be at least 1 (unset turns polling off)".into(),
            ));
        }
        if self.sse_poll_after_ms.is_some() && self.durable_streams == Some(false) {
            problems.push((
                "durable_streams".into(),
                "SSE polling (sse_poll_after_ms) keeps the events of a stream it lets go of in the store: unset durable_streams or set it true".into(),
            ));
        }
        problems
    }
}

impl UpstreamEntry {
    /// What is wrong with this entry, by key within it (`others`: the entries before it,
    /// whose names it must not take).
    pub fn problems(&self, others: &[UpstreamEntry]) -> Problems {
        let mut problems = Problems::new();
        if self.progress_extends_ms == Some(0) {
            problems.push((
                "progress_extends_ms".into(),
                "must be at least 1 (unset: progress extends nothing)".into(),
            ));
        }
        if !crate::upstream::is_valid_name(&self.name) {
            problems.push((
                "name".into(),
                "use 1-32 letters, digits, '_', '.' or '-'".into(),
            ));
        }
        let prefix = self
            .prefix
            .clone()
            .unwrap_or_else(|| format!("{}__", self.name));
        for (field, message) in crate::upstream::ToolOverride::problems(&self.overrides, &prefix) {
            problems.push((format!("overrides.{}", field.replace('/', ".")), message));
        }
        if let Some(exchange) = &self.token_exchange {
            if self.url.is_none() {
                problems.push((
                    "token_exchange".into(),
                    "only an HTTP upstream (`url`) can be called with exchanged tokens".into(),
                ));
            }
            for (field, message) in exchange.problems() {
                problems.push((format!("token_exchange.{field}"), message));
            }
        }
        if self.to_upstream().is_none() {
            problems.push((
                String::new(),
                "set exactly one of `command` (stdio) and `url` (HTTP)".into(),
            ));
        }
        if self.timeout_secs == 0 {
            problems.push(("timeout_secs".into(), "must be at least 1".into()));
        }
        // A bad glob dropped silently would fail open (a `deny` that denies nothing).
        for (field, globs) in [("allow", &self.allow), ("deny", &self.deny)] {
            for (at, problem) in crate::upstream::glob_problems(globs) {
                problems.push((
                    field.into(),
                    match at {
                        Some(i) => format!("{:?}: {problem}", globs[i]),
                        None => problem,
                    },
                ));
            }
        }
        if others.iter().any(|u| u.name == self.name) {
            problems.push(("name".into(), format!("{:?} is used twice", self.name)));
        }
        problems
    }
}

impl TenantUpstreamsConfig {
    /// What is wrong with `[tenant_upstreams]`, by key within it.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        if let Err(problem) = self.networks() {
            problems.push(("allowed_networks".into(), problem));
        }
        if let Some(key) = &self.key
            && settings::hex_key(key.expose()).is_none()
        {
            problems.push((
                "key".into(),
                "must be 64 hex digits (32 bytes), e.g. from `openssl rand -hex 32`".into(),
            ));
        }
        for (i, key) in self.previous_keys.iter().enumerate() {
            if settings::hex_key(key.expose()).is_none() {
                problems.push((
                    format!("previous_keys[{i}]"),
                    "must be 64 hex digits".into(),
                ));
            }
        }
        if self.sync_secs == 0 || self.max_timeout_secs == 0 {
            problems.push((
                String::new(),
                "sync_secs and max_timeout_secs must be at least 1".into(),
            ));
        }
        problems
    }
}

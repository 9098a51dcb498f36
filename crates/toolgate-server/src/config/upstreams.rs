//! `[[upstreams]]`, the operator's MCP servers, and `[tenant_upstreams]`, the rules for
//! those tenant admins add.

use super::*;

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
pub(super) fn parse_networks(networks: &[String]) -> Result<Vec<ipnet::IpNet>, String> {
    networks
        .iter()
        .map(|n| {
            n.parse::<ipnet::IpNet>()
                .or_else(|_| n.parse::<std::net::IpAddr>().map(ipnet::IpNet::from))
                .map_err(|_| format!("{n:?} is not a CIDR network"))
        })
        .collect()
}

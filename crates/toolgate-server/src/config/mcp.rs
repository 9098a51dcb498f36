//! `[mcp]`: the MCP front door at `/mcp`.

use super::*;

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

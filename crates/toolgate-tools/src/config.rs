//! `[tools]`: the built-in tools' settings (`web_fetch`, `web_search`, `execute_command`),
//! and what is wrong with them ([`ToolsConfig::problems`]).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Deserialize;
use toolgate_core::settings::{self, Problems};

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
            max_bytes: crate::web_fetch::FetchOptions::default().max_bytes,
        }
    }
}

impl FetchConfig {
    pub fn networks(&self) -> Result<Vec<ipnet::IpNet>, String> {
        settings::networks(&self.allowed_networks)
    }

    pub fn options(&self) -> Option<crate::web_fetch::FetchOptions> {
        self.enabled.then(|| crate::web_fetch::FetchOptions {
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
    pub fn options(&self) -> Option<crate::web_search::SearchOptions> {
        let url = self.url.as_deref()?.parse().ok()?;
        Some(crate::web_search::SearchOptions {
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
    pub sandbox: crate::SandboxMode,
    /// Per-tenant sandbox, by tenant name (`{ ops = "unrestricted" }`).
    pub tenant_sandbox: BTreeMap<String, crate::SandboxMode>,
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
        let limits = crate::ResourceLimits::default();
        let options = crate::CommandOptions::default();
        Self {
            enabled: true,
            sandbox: crate::SandboxMode::default(),
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
    pub fn options(&self) -> Option<crate::CommandOptions> {
        let defaults = crate::CommandOptions::default();
        self.enabled.then(|| crate::CommandOptions {
            sandbox: self.sandbox,
            tenant_sandbox: self.tenant_sandbox.clone().into_iter().collect(),
            allow_unsandboxed: self.allow_unsandboxed,
            network: self.network,
            read_paths: self.read_paths.clone(),
            limits: crate::ResourceLimits {
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

impl ToolsConfig {
    /// What is wrong with `[tools]`, by key within it.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        if self.max_output_chars == 0 {
            problems.push(("max_output_chars".into(), "must be at least 1".into()));
        }
        if let Err(err) = toolgate_core::SecretNames::new(&self.secret_names) {
            problems.push(("secret_names".into(), err.to_string()));
        }
        if let Err(problem) = self.web_fetch.networks() {
            problems.push(("web_fetch.allowed_networks".into(), problem));
        }
        if let Some(url) = &self.web_search.url
            && let Err(problem) = settings::http_url(url)
        {
            problems.push(("web_search.url".into(), problem));
        }
        let command = &self.execute_command;
        if command.default_timeout_secs == 0
            || command.default_timeout_secs > command.max_timeout_secs
        {
            problems.push((
                "execute_command.default_timeout_secs".into(),
                "must be at least 1 and at most max_timeout_secs".into(),
            ));
        }
        problems
    }
}

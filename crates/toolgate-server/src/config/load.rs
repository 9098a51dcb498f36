//! Building a [`Config`]: defaults, then the TOML file, the `TOOLGATE_*` environment
//! and the command-line flags; then every problem at once, not the first.

use super::*;

/// Variables that name command-line flags; clap reads them, the overlay skips them.
const FLAG_VARIABLES: [&str; 3] = ["TOOLGATE_CONFIG", "TOOLGATE_LISTEN", "TOOLGATE_DATA_DIR"];

impl Config {
    /// Builds the configuration from a file (if named), the `TOOLGATE_*` entries of `env`,
    /// and the flags in `overrides`.
    pub fn load(
        overrides: &Overrides,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut errors = Vec::new();
        let mut table = toml::Table::new();
        if let Some(path) = &overrides.config_file {
            match std::fs::read_to_string(path) {
                Ok(text) => match text.parse::<toml::Table>() {
                    Ok(file) => table = file,
                    Err(e) => errors.push((path.display().to_string(), e.message().to_owned())),
                },
                Err(e) => errors.push((path.display().to_string(), format!("cannot read: {e}"))),
            }
        }
        let env: BTreeMap<String, String> = env.into_iter().collect();
        for (name, value) in &env {
            let Some(key) = name.strip_prefix("TOOLGATE_") else {
                continue;
            };
            if FLAG_VARIABLES.contains(&name.as_str()) || key.is_empty() {
                continue;
            }
            let path: Vec<String> = key.split("__").map(str::to_lowercase).collect();
            if let Err(problem) = set_path(&mut table, &path, parse_scalar(value)) {
                errors.push((name.clone(), problem));
            }
        }
        // The conventional variable, unless the toolgate-specific one is set.
        if let Some(url) = env
            .get("DATABASE_URL")
            .filter(|_| !env.contains_key("TOOLGATE_DATABASE__URL"))
        {
            let _ = set_path(
                &mut table,
                &["database".into(), "url".into()],
                toml::Value::String(url.clone()),
            );
        }
        if let Some(listen) = &overrides.listen {
            table.insert("listen".into(), toml::Value::String(listen.clone()));
        }
        if let Some(dir) = &overrides.data_dir {
            table.insert(
                "data_dir".into(),
                toml::Value::String(dir.display().to_string()),
            );
        }
        let config = match serde_path_to_error::deserialize::<_, Config>(toml::Value::Table(table))
        {
            Ok(mut config) => {
                for (name, provider) in &mut config.providers {
                    if provider.api_key.is_none()
                        && let Some(var) = &provider.api_key_env
                    {
                        match env.get(var) {
                            Some(key) => provider.api_key = Some(Secret::new(key.clone())),
                            None => errors.push((
                                format!("providers.{name}.api_key_env"),
                                format!("the environment variable {var} is not set"),
                            )),
                        }
                    }
                }
                Some(config)
            }
            Err(e) => {
                let key = e.path().to_string();
                errors.push((
                    if key == "." { "(root)".into() } else { key },
                    e.into_inner().to_string(),
                ));
                None
            }
        };
        if let Some(config) = &config {
            config.validate(&mut errors);
        }
        match config {
            Some(config) if errors.is_empty() => Ok(config),
            _ => Err(ConfigError(errors)),
        }
    }

    fn validate(&self, errors: &mut Vec<(String, String)>) {
        if let Some(url) = &self.database.url
            && !(url.expose().starts_with("postgres://")
                || url.expose().starts_with("postgresql://"))
        {
            errors.push((
                "database.url".into(),
                "must be a postgres:// URL (unset for embedded SQLite)".into(),
            ));
        }
        if let Some(jwt) = &self.auth.jwt {
            errors.extend(jwt.problems());
        }
        for server in &self.mcp.authorization_servers {
            if let Err(problem) = http_url(server) {
                errors.push(("mcp.authorization_servers".into(), problem));
            }
        }
        if self.http.max_body_bytes == 0 {
            errors.push(("http.max_body_bytes".into(), "must be at least 1".into()));
        }
        for (key, secs) in [
            (
                "http.header_read_timeout_secs",
                self.http.header_read_timeout_secs,
            ),
            (
                "http.body_read_timeout_secs",
                self.http.body_read_timeout_secs,
            ),
            (
                "database.statement_timeout_ms",
                self.database.statement_timeout_ms,
            ),
            (
                "database.acquire_timeout_ms",
                self.database.acquire_timeout_ms,
            ),
            (
                "mcp.session_retention_secs",
                self.mcp.session_retention_secs,
            ),
        ] {
            if secs == 0 {
                errors.push((key.into(), "must be at least 1".into()));
            }
        }
        for origin in &self.http.cors_allowed_origins {
            if origin != "*" && axum::http::HeaderValue::from_str(origin).is_err() {
                errors.push((
                    "http.cors_allowed_origins".into(),
                    format!("{origin:?} is not a valid origin"),
                ));
            }
        }
        if let Some(url) = &self.telemetry.otlp_endpoint
            && let Err(problem) = http_url(url)
        {
            errors.push(("telemetry.otlp_endpoint".into(), problem));
        }
        for (field, message) in self.limits.admission().defaults.problems() {
            errors.push((format!("limits.{}", field.replace('/', ".")), message));
        }
        if self.limits.max_in_flight == 0 || self.limits.max_audit_backlog == 0 {
            errors.push((
                "limits".into(),
                "max_in_flight and max_audit_backlog must be at least 1".into(),
            ));
        }
        errors.extend(self.console.problems(self.auth.jwt.as_ref()));
        for (field, message) in self.cache.problems() {
            errors.push((format!("cache.{}", field.replace('/', ".")), message));
        }
        if self.tools.max_output_chars == 0 {
            errors.push(("tools.max_output_chars".into(), "must be at least 1".into()));
        }
        if let Some(key) = &self.audit.signing_key
            && crate::key_file::parse_key(key.expose()).is_none()
        {
            errors.push(("audit.signing_key".into(), "must be 64 hex digits".into()));
        }
        if let Err(err) = toolgate_core::SecretNames::new(&self.tools.secret_names) {
            errors.push(("tools.secret_names".into(), err.to_string()));
        }
        if let Err(problem) = self.tools.web_fetch.networks() {
            errors.push(("tools.web_fetch.allowed_networks".into(), problem));
        }
        if let Some(url) = &self.tools.web_search.url
            && !(url.starts_with("https://") || url.starts_with("http://"))
        {
            errors.push((
                "tools.web_search.url".into(),
                format!("{url:?} is not an http(s) URL"),
            ));
        }
        let command = &self.tools.execute_command;
        if command.default_timeout_secs == 0
            || command.default_timeout_secs > command.max_timeout_secs
        {
            errors.push((
                "tools.execute_command.default_timeout_secs".into(),
                "must be at least 1 and at most max_timeout_secs".into(),
            ));
        }
        for (i, upstream) in self.upstreams.iter().enumerate() {
            let key = format!("upstreams[{i}]");
            if upstream.progress_extends_ms == Some(0) {
                errors.push((
                    format!("{key}.progress_extends_ms"),
                    "must be at least 1 (unset: progress extends nothing)".into(),
                ));
            }
            if !toolgate_mcp::upstream::is_valid_name(&upstream.name) {
                errors.push((
                    format!("{key}.name"),
                    "use 1-32 letters, digits, '_', '.' or '-'".into(),
                ));
            }
            let prefix = upstream
                .prefix
                .clone()
                .unwrap_or_else(|| format!("{}__", upstream.name));
            for (field, message) in
                toolgate_mcp::upstream::ToolOverride::problems(&upstream.overrides, &prefix)
            {
                errors.push((
                    format!("{key}.overrides.{}", field.replace('/', ".")),
                    message,
                ));
            }
            if let Some(exchange) = &upstream.token_exchange {
                if upstream.url.is_none() {
                    errors.push((
                        format!("{key}.token_exchange"),
                        "only an HTTP upstream (`url`) can be called with exchanged tokens".into(),
                    ));
                }
                for (field, message) in exchange.problems() {
                    errors.push((format!("{key}.token_exchange.{field}"), message));
                }
            }
            if upstream.to_upstream().is_none() {
                errors.push((
                    key.clone(),
                    "set exactly one of `command` (stdio) and `url` (HTTP)".into(),
                ));
            }
            if upstream.timeout_secs == 0 {
                errors.push((format!("{key}.timeout_secs"), "must be at least 1".into()));
            }
            // A bad glob dropped silently would fail open (a `deny` that denies nothing).
            for (field, globs) in [("allow", &upstream.allow), ("deny", &upstream.deny)] {
                for glob in globs {
                    if let Some(problem) = toolgate_mcp::upstream::glob_problem(glob) {
                        errors.push((format!("{key}.{field}"), format!("{glob:?}: {problem}")));
                    }
                }
            }
            if self.upstreams[..i].iter().any(|u| u.name == upstream.name) {
                errors.push((
                    format!("{key}.name"),
                    format!("{:?} is used twice", upstream.name),
                ));
            }
        }
        let tenant = &self.tenant_upstreams;
        if let Err(problem) = tenant.networks() {
            errors.push(("tenant_upstreams.allowed_networks".into(), problem));
        }
        if let Some(key) = &tenant.key
            && crate::key_file::parse_key(key.expose()).is_none()
        {
            errors.push((
                "tenant_upstreams.key".into(),
                "must be 64 hex digits (32 bytes), e.g. from `openssl rand -hex 32`".into(),
            ));
        }
        if tenant.sync_secs == 0 || tenant.max_timeout_secs == 0 {
            errors.push((
                "tenant_upstreams".into(),
                "sync_secs and max_timeout_secs must be at least 1".into(),
            ));
        }
        for (name, provider) in &self.providers {
            let key = format!("providers.{name}");
            if !(provider.base_url.starts_with("http://")
                || provider.base_url.starts_with("https://"))
            {
                errors.push((
                    format!("{key}.base_url"),
                    "must be an http:// or https:// URL".into(),
                ));
            }
            if provider.timeout_secs == 0 {
                errors.push((format!("{key}.timeout_secs"), "must be at least 1".into()));
            }
            if let Err(e) = toolgate_agent::provider::http::HttpClient::new(&provider.to_provider())
            {
                errors.push((format!("{key}.headers"), e));
            }
        }
        if let Err(e) = self.mcp.vendor_meta() {
            errors.push(("mcp.vendor_meta".into(), e));
        }
        if self.mcp.sse_poll_after_ms == Some(0) {
            errors.push((
                "mcp.sse_poll_after_ms".into(),
                "must be at least 1 (unset turns polling off)".into(),
            ));
        }
        if self.mcp.sse_poll_after_ms.is_some() && self.mcp.durable_streams == Some(false) {
            errors.push((
                "mcp.durable_streams".into(),
                "SSE polling (sse_poll_after_ms) keeps the events of a stream it lets go of in the store: unset durable_streams or set it true".into(),
            ));
        }
        if let Err(e) = tracing_subscriber::EnvFilter::try_new(&self.log.filter) {
            errors.push(("log.filter".into(), e.to_string()));
        }
    }

    /// Where the bootstrap admin key is written.
    pub fn admin_key_file(&self) -> PathBuf {
        self.auth
            .admin_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("admin-api-key"))
    }

    /// Where the audit signing key is kept when not configured.
    pub fn audit_key_file(&self) -> PathBuf {
        self.audit
            .signing_key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("audit-signing-key"))
    }

    /// The key signing audit checkpoints: configured, or from its file (made if absent).
    pub fn audit_signer(&self) -> anyhow::Result<toolgate_store::checkpoint::AuditSigner> {
        let seed = crate::key_file::load(
            self.audit.signing_key.as_ref(),
            &self.audit_key_file(),
            "audit.signing_key",
        )?;
        Ok(toolgate_store::checkpoint::AuditSigner::from_seed(&seed))
    }

    /// Where the key sealing tenant upstreams' credentials is kept when not configured.
    pub fn upstream_key_file(&self) -> PathBuf {
        self.tenant_upstreams
            .key_file
            .clone()
            .unwrap_or_else(|| self.data_dir.join("upstream-credentials-key"))
    }

    /// What the tenant-upstream supervisor needs: the sealing key (configured, or the key
    /// file's, made with a random key, mode 0600, if absent), where upstreams may connect,
    /// the names the operator's upstreams take, and the caps.
    pub fn tenant_upstream_settings(
        &self,
    ) -> anyhow::Result<toolgate_mcp::tenant_upstreams::Settings> {
        let tenant = &self.tenant_upstreams;
        Ok(toolgate_mcp::tenant_upstreams::Settings {
            key: crate::key_file::load(
                tenant.key.as_ref(),
                &self.upstream_key_file(),
                "tenant_upstreams.key",
            )?,
            allow_http: tenant.allow_http,
            allowed_networks: tenant.networks().map_err(anyhow::Error::msg)?,
            ca_file: tenant.ca_file.clone(),
            reserved: self.upstreams.iter().map(|u| u.name.clone()).collect(),
            max_per_tenant: tenant.max_per_tenant,
            max_timeout_secs: tenant.max_timeout_secs,
        })
    }

    /// The workspace root: `tools.workspace_root`, or `<data_dir>/workspace`.
    pub fn workspace_root(&self) -> PathBuf {
        self.tools
            .workspace_root
            .clone()
            .unwrap_or_else(|| self.data_dir.join("workspace"))
    }
}

/// A TOML scalar when `raw` parses as one (`true`, `42`, `[1, 2]`), else the string.
fn parse_scalar(raw: &str) -> toml::Value {
    format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.to_owned()))
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) -> Result<(), String> {
    match path {
        [] => Err("empty key".into()),
        [last] => {
            table.insert(last.clone(), value);
            Ok(())
        }
        [first, rest @ ..] => {
            let entry = table
                .entry(first.clone())
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match entry {
                toml::Value::Table(inner) => set_path(inner, rest, value),
                _ => Err(format!("{first} is not a section")),
            }
        }
    }
}

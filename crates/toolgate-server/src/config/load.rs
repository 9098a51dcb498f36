//! Building a [`Config`]: defaults, then the TOML file, the `TOOLGATE_*` environment
//! and the command-line flags; then every problem at once, not the first.

use super::*;
use toolgate_core::settings::within;

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
        // The key each `TOOLGATE_*` variable set, to name the variable in its problems.
        let mut from_env: BTreeMap<String, &str> = BTreeMap::new();
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
            from_env.insert(path.join("."), name);
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
        for (key, problem) in &mut errors {
            if let Some(name) = from_env.get(key.as_str()) {
                *problem = format!(
                    "{} (set by the environment variable {name})",
                    problem.trim_end()
                );
            }
        }
        match config {
            Some(config) if errors.is_empty() => Ok(config),
            _ => Err(ConfigError(errors)),
        }
    }

    /// Every section's problems, named by their full keys: each section says what is
    /// wrong with it (the crate owning it checks it), here only layered.
    fn validate(&self, errors: &mut Vec<(String, String)>) {
        errors.extend(within("database", self.database.problems()));
        if let Some(jwt) = &self.auth.jwt {
            errors.extend(jwt.problems());
        }
        errors.extend(within("http", self.http.problems()));
        errors.extend(within("telemetry", self.telemetry.problems()));
        errors.extend(within("limits", self.limits.problems()));
        errors.extend(self.console.problems(self.auth.jwt.as_ref()));
        for (field, message) in self.cache.problems() {
            errors.push((format!("cache.{}", field.replace('/', ".")), message));
        }
        errors.extend(within("audit", self.audit.problems()));
        errors.extend(within("tools", self.tools.problems()));
        for (i, upstream) in self.upstreams.iter().enumerate() {
            errors.extend(within(
                &format!("upstreams[{i}]"),
                upstream.problems(&self.upstreams[..i]),
            ));
        }
        errors.extend(within("tenant_upstreams", self.tenant_upstreams.problems()));
        for (name, provider) in &self.providers {
            errors.extend(within(&format!("providers.{name}"), provider.problems()));
        }
        errors.extend(within("mcp", self.mcp.problems()));
        errors.extend(within("log", self.log.problems()));
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
        Ok(toolgate_store::checkpoint::AuditSigner::from_seed(
            &self.audit_seed()?,
        ))
    }

    /// The key naming calls' unmasked arguments (see `ArgumentsDigest`), derived from the
    /// audit signing key: instances sharing a database share it already.
    pub fn arguments_digest(&self) -> anyhow::Result<toolgate_core::audit::ArgumentsDigest> {
        Ok(toolgate_core::audit::ArgumentsDigest::keyed(
            &self.audit_seed()?,
        ))
    }

    fn audit_seed(&self) -> anyhow::Result<[u8; 32]> {
        crate::key_file::load(
            self.audit.signing_key.as_ref(),
            &self.audit_key_file(),
            "audit.signing_key",
        )
    }

    /// The keys checkpoints' signatures are checked against: the deployment's first, then
    /// `audit.previous_public_keys`; none when this host does not hold the deployment's
    /// key (never a new one made here).
    pub fn audit_keys(&self) -> anyhow::Result<Vec<toolgate_store::checkpoint::VerifyingKey>> {
        // Without the deployment's own key, signatures are not checked at all: its
        // checkpoints would otherwise read as forged.
        if self.audit.signing_key.is_none() && !self.audit_key_file().exists() {
            return Ok(Vec::new());
        }
        let mut keys = vec![self.audit_signer()?.public_key()];
        // Checked by `problems`.
        keys.extend(
            self.audit
                .previous_public_keys
                .iter()
                .filter_map(|k| toolgate_store::checkpoint::parse_public_key(k)),
        );
        Ok(keys)
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
            // Checked by `problems`: one that is not a key cannot open anything.
            previous_keys: tenant
                .previous_keys
                .iter()
                .filter_map(|k| toolgate_core::settings::hex_key(k.expose()))
                .collect(),
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

//! Results of idempotent, read-only tools kept for a while, opt-in per tool.
//!
//! A tool may be cached only when it declares that it neither writes nor changes anything
//! when called again ([`Effects::writes`] false, [`Effects::idempotent`] true: built-in
//! read tools, upstream tools whose annotations say `readOnlyHint` and `idempotentHint`).
//! Whether it *is* cached, and for how long, is configured: the operator's `[cache.tools]`
//! for every tenant, a tenant's policy `cache` for its own calls (`0` turns an operator
//! default off), never longer than the operator's `max_ttl_secs`.
//!
//! Entries are keyed by tenant, tool name and the digest of the arguments as sent
//! ([`crate::audit::ArgumentsDigest`], canonical: key order does not matter), so a tenant never
//! gets another tenant's result. A cache hit is still a call: the executor resolves,
//! validates, authorizes and applies the tenant's policy before it looks, and the hit
//! leaves its audit row (`cache = hit`) and call events like any other. Only the tool's
//! own run is skipped. A caller may bypass the cache ([`CacheMode`]): REST
//! `Cache-Control: no-cache` / `no-store`, MCP `_meta` `toolgate/cache`.
//!
//! The cache lives in the instance's memory, bounded in bytes (`max_bytes`; least
//! recently used entries go first), and is not shared between instances.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::{Content, Effects, TenantId, ToolOutput};

/// How a caller wants the cache used for one call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CacheMode {
    /// A fresh enough cached result answers the call; a result the tool produced is kept.
    #[default]
    Use,
    /// The tool runs whatever is cached, and its result replaces the cached one
    /// (`Cache-Control: no-cache`).
    Refresh,
    /// The tool runs and nothing is kept (`Cache-Control: no-store`).
    Bypass,
}

impl CacheMode {
    /// The mode a `Cache-Control` header value asks for (`no-store` wins over
    /// `no-cache`); `None` when it names neither.
    pub fn from_cache_control(value: &str) -> Option<Self> {
        let directives = value
            .split(',')
            .map(|d| d.trim().to_ascii_lowercase())
            .collect::<Vec<_>>();
        if directives.iter().any(|d| d == "no-store") {
            Some(Self::Bypass)
        } else if directives.iter().any(|d| d == "no-cache") {
            Some(Self::Refresh)
        } else {
            None
        }
    }
}

/// What the cache did for a call of a cached tool; recorded in its audit row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// Answered from the cache: the tool did not run.
    Hit,
    /// Nothing fresh was cached: the tool ran (and its result was kept, if it succeeded).
    Miss,
    /// The caller asked for a fresh result ([`CacheMode::Refresh`] or
    /// [`CacheMode::Bypass`]): the tool ran.
    Bypass,
}

impl CacheStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hit => "hit",
            Self::Miss => "miss",
            Self::Bypass => "bypass",
        }
    }
}

/// The operator's settings (`[cache]`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// Memory the cached results may take, in bytes (about: text, data and structured
    /// output). 0 turns caching off for every tenant.
    pub max_bytes: u64,
    /// Longest any result is kept, whatever a tenant asks.
    pub max_ttl_secs: u64,
    /// Tools cached for every tenant, by name, with their time to live in seconds.
    pub tools: BTreeMap<String, u64>,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            max_bytes: 64 * 1024 * 1024,
            max_ttl_secs: 3600,
            tools: BTreeMap::new(),
        }
    }
}

impl CacheConfig {
    /// Problems that make the settings unusable, each with the field it concerns.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut problems = Vec::new();
        if self.max_ttl_secs == 0 {
            problems.push(("max_ttl_secs".into(), "must be at least 1".into()));
        }
        for (tool, ttl) in &self.tools {
            if !crate::spec::is_valid_tool_name(tool) {
                problems.push((format!("tools/{tool}"), "is not a valid tool name".into()));
            }
            if *ttl > self.max_ttl_secs {
                problems.push((
                    format!("tools/{tool}"),
                    format!("is longer than max_ttl_secs ({})", self.max_ttl_secs),
                ));
            }
        }
        problems
    }
}

/// Whether a tool declaring `effects` may have its results cached at all.
pub fn cacheable(effects: &Effects) -> bool {
    !effects.writes && effects.idempotent
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Key {
    tenant: TenantId,
    tool: Arc<str>,
    arguments_hash: Arc<str>,
}

struct Entry {
    output: ToolOutput,
    truncated: bool,
    expires: Instant,
}

/// The instance's cached results. Cheap to clone.
#[derive(Clone)]
pub struct ResultCache {
    entries: Option<moka::sync::Cache<Key, Arc<Entry>>>,
    config: Arc<CacheConfig>,
}

impl Default for ResultCache {
    /// Caches nothing.
    fn default() -> Self {
        Self::new(CacheConfig {
            max_bytes: 0,
            ..CacheConfig::default()
        })
    }
}

impl ResultCache {
    pub fn new(config: CacheConfig) -> Self {
        let entries = (config.max_bytes > 0).then(|| {
            moka::sync::Cache::builder()
                .max_capacity(config.max_bytes)
                .weigher(|_: &Key, entry: &Arc<Entry>| weight(&entry.output))
                .time_to_live(Duration::from_secs(config.max_ttl_secs.max(1)))
                .build()
        });
        Self {
            entries,
            config: Arc::new(config),
        }
    }

    /// How long results of `tool` (declaring `effects`) are kept for a tenant whose
    /// policy says `tenant` (its `cache` map); `None`: not cached.
    pub fn ttl(
        &self,
        tool: &str,
        effects: &Effects,
        tenant: Option<&BTreeMap<String, u64>>,
    ) -> Option<Duration> {
        self.entries.as_ref()?;
        if !cacheable(effects) {
            return None;
        }
        let secs = tenant
            .and_then(|t| t.get(tool))
            .or_else(|| self.config.tools.get(tool))
            .copied()?
            .min(self.config.max_ttl_secs);
        (secs > 0).then(|| Duration::from_secs(secs))
    }

    /// The cached result of `tool` called with arguments hashing to `arguments_hash`,
    /// if one is fresh: the output and whether it was truncated.
    pub fn get(
        &self,
        tenant: TenantId,
        tool: &str,
        arguments_hash: &str,
    ) -> Option<(ToolOutput, bool)> {
        let entries = self.entries.as_ref()?;
        let key = Key {
            tenant,
            tool: tool.into(),
            arguments_hash: arguments_hash.into(),
        };
        let entry = entries.get(&key)?;
        if entry.expires <= Instant::now() {
            entries.invalidate(&key);
            return None;
        }
        Some((entry.output.clone(), entry.truncated))
    }

    /// Keeps `output` as the result of `tool` with those arguments for `ttl`.
    pub fn put(
        &self,
        tenant: TenantId,
        tool: &str,
        arguments_hash: &str,
        output: &ToolOutput,
        truncated: bool,
        ttl: Duration,
    ) {
        let Some(entries) = &self.entries else {
            return;
        };
        entries.insert(
            Key {
                tenant,
                tool: tool.into(),
                arguments_hash: arguments_hash.into(),
            },
            Arc::new(Entry {
                output: output.clone(),
                truncated,
                expires: Instant::now() + ttl,
            }),
        );
    }
}

/// About the bytes an output takes: its text, data and structured JSON.
fn weight(output: &ToolOutput) -> u32 {
    let content: usize = output
        .content
        .iter()
        .map(|c| match c {
            Content::Text { text } => text.len(),
            Content::Image { data, mime_type } | Content::Audio { data, mime_type } => {
                data.len() + mime_type.len()
            }
            Content::Resource { resource: value } | Content::ResourceLink { link: value } => {
                json_len(value)
            }
        })
        .sum();
    let structured = output.structured.as_ref().map_or(0, json_len);
    u32::try_from(64 + content + structured).unwrap_or(u32::MAX)
}

fn json_len(value: &serde_json::Value) -> usize {
    serde_json::to_vec(value).map_or(0, |v| v.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant_map(entries: &[(&str, u64)]) -> BTreeMap<String, u64> {
        entries.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
    }

    #[test]
    fn only_read_only_idempotent_tools_configured_for_it_are_cached() {
        let cache = ResultCache::new(CacheConfig {
            tools: tenant_map(&[("read_file", 30), ("write_file", 30)]),
            max_ttl_secs: 60,
            ..CacheConfig::default()
        });
        let read = Effects::READ_ONLY;
        let write = Effects {
            writes: true,
            ..Effects::READ_ONLY
        };
        let not_idempotent = Effects {
            idempotent: false,
            ..Effects::READ_ONLY
        };
        assert_eq!(
            cache.ttl("read_file", &read, None),
            Some(Duration::from_secs(30))
        );
        assert_eq!(cache.ttl("write_file", &write, None), None);
        assert_eq!(cache.ttl("read_file", &not_idempotent, None), None);
        assert_eq!(cache.ttl("list_files", &read, None), None);
        // A tenant turns the operator's default off, or sets its own, capped.
        let off = tenant_map(&[("read_file", 0)]);
        assert_eq!(cache.ttl("read_file", &read, Some(&off)), None);
        let long = tenant_map(&[("list_files", 999)]);
        assert_eq!(
            cache.ttl("list_files", &read, Some(&long)),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            ResultCache::default().ttl("read_file", &read, None),
            None,
            "the default cache keeps nothing"
        );
    }

    #[test]
    fn entries_are_per_tenant_and_expire() {
        let cache = ResultCache::new(CacheConfig::default());
        let (a, b) = (TenantId::new(), TenantId::new());
        cache.put(
            a,
            "read_file",
            "h",
            &ToolOutput::text("a's"),
            false,
            Duration::from_secs(60),
        );
        assert_eq!(
            cache.get(a, "read_file", "h"),
            Some((ToolOutput::text("a's"), false))
        );
        assert_eq!(cache.get(b, "read_file", "h"), None);
        assert_eq!(cache.get(a, "read_file", "other"), None);
        assert_eq!(cache.get(a, "list_files", "h"), None);
        cache.put(
            a,
            "read_file",
            "h",
            &ToolOutput::text("old"),
            false,
            Duration::ZERO,
        );
        assert_eq!(cache.get(a, "read_file", "h"), None, "expired");
    }

    #[test]
    fn cache_control_names_the_mode() {
        assert_eq!(
            CacheMode::from_cache_control("no-cache"),
            Some(CacheMode::Refresh)
        );
        assert_eq!(
            CacheMode::from_cache_control("max-age=0, No-Store"),
            Some(CacheMode::Bypass)
        );
        assert_eq!(CacheMode::from_cache_control("max-age=10"), None);
    }

    #[test]
    fn settings_are_checked() {
        let config = CacheConfig {
            max_ttl_secs: 10,
            tools: tenant_map(&[("read_file", 11), ("bad name", 1)]),
            ..CacheConfig::default()
        };
        let fields: Vec<String> = config.problems().into_iter().map(|(f, _)| f).collect();
        assert_eq!(fields, ["tools/bad name", "tools/read_file"]);
    }
}

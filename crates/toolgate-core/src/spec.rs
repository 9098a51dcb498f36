//! What a tool declares about itself.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Output text longer than this many characters is cut, with a visible marker.
pub const DEFAULT_MAX_OUTPUT_CHARS: usize = 50_000;
/// Deadline for a tool that declares none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Longest deadline a caller may ask for on a tool that declares none.
pub const DEFAULT_MAX_TIMEOUT: Duration = Duration::from_secs(120);

/// How much harm a call can do. Drives approval policy and MCP annotations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Risk {
    /// Reads only.
    Low,
    /// Changes state inside the workspace or tenant.
    Medium,
    /// Runs code, reaches the network, or changes things outside the gateway.
    High,
}

impl Risk {
    /// Its name, as stored and shown (`low`, `medium`, `high`).
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
}

/// What a call does to the world, stated by the tool (the MCP annotations are derived
/// from it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Effects {
    /// The call changes state (files, processes, remote systems).
    pub writes: bool,
    /// A change may destroy or overwrite existing state.
    pub destructive: bool,
    /// Calling again with the same arguments has no further effect.
    pub idempotent: bool,
    /// The call reaches things outside the gateway's control (the web, upstreams).
    pub open_world: bool,
}

impl Effects {
    /// A pure read of gateway-controlled state.
    pub const READ_ONLY: Effects = Effects {
        writes: false,
        destructive: false,
        idempotent: true,
        open_world: false,
    };
}

/// A tool's declaration: everything the executor and the adapters need to know about it
/// without calling it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ToolSpec {
    /// Unique in the registry; `^[A-Za-z0-9_.-]{1,64}$`.
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    /// JSON Schema for the arguments object.
    pub input_schema: Value,
    /// JSON Schema for `ToolOutput::structured`, when the tool produces structured output.
    pub output_schema: Option<Value>,
    /// Free-form grouping used by toolset filters (`workspace`, `diagnostics`, …).
    pub category: String,
    pub risk: Risk,
    pub effects: Effects,
    /// Deadline when the caller asks for none.
    #[serde(with = "millis")]
    pub default_timeout: Duration,
    /// Longest deadline a caller may ask for; longer requests are clamped to it.
    #[serde(with = "millis")]
    pub max_timeout: Duration,
    /// Each progress report the tool makes moves its deadline to at least this long
    /// from then, never beyond `max_timeout` (nor beyond a deadline the caller asked
    /// for). `None`: progress does not extend the deadline.
    #[serde(skip)]
    pub progress_extends: Option<Duration>,
    /// A scope the caller must hold to call this tool, beyond `tools:invoke`.
    pub required_scope: Option<String>,
    /// JSON pointers of argument fields holding secrets: masked in audit rows and logs.
    pub secret_fields: Vec<String>,
    /// Text output beyond this many characters is truncated with a marker.
    pub max_output_chars: usize,
    /// Vendor metadata for the tool's MCP declaration (`openai/outputTemplate` and the
    /// like), sent as `_meta` only to clients configured to receive its vendor prefix.
    /// Tools state it once; which client sees it is the MCP adapter's decision.
    #[serde(skip)]
    pub vendor_meta: serde_json::Map<String, Value>,
}

impl ToolSpec {
    /// A low-risk, read-only tool with default timeouts; adjust with the `with_*` methods.
    pub fn new(
        name: impl Into<String>,
        description: impl Into<String>,
        input_schema: Value,
    ) -> Self {
        Self {
            name: name.into(),
            title: None,
            description: description.into(),
            input_schema,
            output_schema: None,
            category: "general".to_owned(),
            risk: Risk::Low,
            effects: Effects::READ_ONLY,
            default_timeout: DEFAULT_TIMEOUT,
            max_timeout: DEFAULT_MAX_TIMEOUT,
            progress_extends: None,
            required_scope: None,
            secret_fields: Vec::new(),
            max_output_chars: DEFAULT_MAX_OUTPUT_CHARS,
            vendor_meta: serde_json::Map::new(),
        }
    }

    /// See [`ToolSpec::progress_extends`].
    pub fn with_progress_extension(mut self, extension: Option<Duration>) -> Self {
        self.progress_extends = extension;
        self
    }

    pub fn with_title(mut self, title: impl Into<String>) -> Self {
        self.title = Some(title.into());
        self
    }

    pub fn with_category(mut self, category: impl Into<String>) -> Self {
        self.category = category.into();
        self
    }

    pub fn with_risk(mut self, risk: Risk, effects: Effects) -> Self {
        self.risk = risk;
        self.effects = effects;
        self
    }

    pub fn with_output_schema(mut self, schema: Value) -> Self {
        self.output_schema = Some(schema);
        self
    }

    /// Default and maximum deadline. The maximum is raised to the default if lower.
    pub fn with_timeouts(mut self, default: Duration, max: Duration) -> Self {
        self.default_timeout = default;
        self.max_timeout = max.max(default);
        self
    }

    pub fn with_required_scope(mut self, scope: impl Into<String>) -> Self {
        self.required_scope = Some(scope.into());
        self
    }

    pub fn with_secret_fields(
        mut self,
        pointers: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        self.secret_fields = pointers.into_iter().map(Into::into).collect();
        self
    }

    /// Adds a vendor `_meta` entry, keyed `vendor/name` (e.g. `openai/outputTemplate`).
    pub fn with_vendor_meta(mut self, key: impl Into<String>, value: Value) -> Self {
        self.vendor_meta.insert(key.into(), value);
        self
    }

    pub fn with_max_output_chars(mut self, chars: usize) -> Self {
        self.max_output_chars = chars;
        self
    }

    /// The deadline for a call that asked for `requested`: the tool's default when none,
    /// never more than the tool's maximum.
    pub fn effective_timeout(&self, requested: Option<Duration>) -> Duration {
        requested
            .unwrap_or(self.default_timeout)
            .min(self.max_timeout)
    }
}

/// The longest valid tool name, in bytes (see [`is_valid_tool_name`]).
pub const MAX_TOOL_NAME: usize = 64;

/// Whether `name` is a valid tool name: `^[A-Za-z0-9_.-]{1,64}$`, the subset every LLM
/// provider and MCP client accepts.
pub fn is_valid_tool_name(name: &str) -> bool {
    (1..=MAX_TOOL_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

mod millis {
    use std::time::Duration;

    use serde::Serializer;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_names_follow_the_provider_safe_subset() {
        for ok in ["read_file", "a", "fs.read-file_2", &"x".repeat(64)] {
            assert!(is_valid_tool_name(ok), "{ok}");
        }
        for bad in [
            "",
            "has space",
            "slash/name",
            "ünï",
            &"x".repeat(65),
            "semi;colon",
        ] {
            assert!(!is_valid_tool_name(bad), "{bad}");
        }
    }

    #[test]
    fn requested_timeout_never_exceeds_the_tools_max() {
        let spec = ToolSpec::new("t", "d", serde_json::json!({}))
            .with_timeouts(Duration::from_secs(5), Duration::from_secs(10));
        assert_eq!(spec.effective_timeout(None), Duration::from_secs(5));
        assert_eq!(
            spec.effective_timeout(Some(Duration::from_secs(1))),
            Duration::from_secs(1)
        );
        assert_eq!(
            spec.effective_timeout(Some(Duration::from_secs(99))),
            Duration::from_secs(10)
        );
    }
}

//! An agent: a tenant's named configuration of model, prompt and scoped toolset.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use toolgate_core::Toolset;

use crate::protocol::Protocol;

/// Default and largest `max_turns`.
pub const DEFAULT_MAX_TURNS: u32 = 10;
pub const MAX_MAX_TURNS: u32 = 100;
/// Identical consecutive calls before the next one is refused.
pub const DEFAULT_REPETITION_LIMIT: u32 = 3;
/// Default and largest `output_retries`.
pub const DEFAULT_OUTPUT_RETRIES: u32 = 2;
pub const MAX_OUTPUT_RETRIES: u32 = 5;

/// What an agent is, as stored and as sent over REST.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// `^[a-z0-9][a-z0-9_-]{0,62}$`, unique in the tenant.
    pub name: String,
    /// A provider the operator configured (`[providers.<name>]`).
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Tool names or globs (`fs.*`); tools of the listed `categories` too. Both empty: no
    /// tools at all. Always intersected with the caller's own toolset.
    #[serde(default)]
    pub tools: Vec<String>,
    #[serde(default)]
    pub categories: Vec<String>,
    /// How the model calls tools: its provider's function calling, or a text protocol.
    #[serde(default)]
    pub protocol: Protocol,
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Off: one tool call per turn; extra calls are answered "not executed".
    #[serde(default = "default_true")]
    pub parallel_tool_calls: bool,
    /// Each tool call's deadline (clamped to the tool's maximum); the tool's default when
    /// unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Identical consecutive tool calls (same tool, same arguments) allowed before the
    /// next is refused; the run ends if the model insists.
    #[serde(default = "default_repetition_limit")]
    pub repetition_limit: u32,
    /// A JSON Schema (root `"type": "object"`) the final answer must match: the model is
    /// told it (natively where the provider can), every answer is validated, and a
    /// mismatch goes back to the model up to `output_retries` times before the run fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// Model routing: a faster (cheaper) model for the steps that need no tools. The first
    /// turn asks it, tools declared: an answer without tool calls ends the run; a reply
    /// that calls tools is not run but routed (a `model_routed` step) and the turn asked
    /// of `model`, which handles every tool-using turn; answers the gateway asks for
    /// without tools (turn limit, a persisting repetition, calls that all failed) go to
    /// it as well. Each `model_message` step says which model answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_model: Option<String>,
    /// The provider of `fast_model`; `provider` when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_provider: Option<String>,
    /// Stream the model's replies: text and reasoning reach the run's event stream as
    /// they are generated (`model_delta`), before each whole `model_message` step.
    #[serde(default)]
    pub stream: bool,
    /// Answers that did not match `output_schema` sent back for another try (0–5).
    #[serde(default = "default_output_retries")]
    pub output_retries: u32,
    /// Refused when set (see [`AgentConfig::problems`]): kept so that a request naming
    /// it hears where its rules belong, and agents stored before still load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_policy: Option<serde_json::Value>,
}

fn default_max_turns() -> u32 {
    DEFAULT_MAX_TURNS
}

fn default_true() -> bool {
    true
}

fn default_output_retries() -> u32 {
    DEFAULT_OUTPUT_RETRIES
}

fn default_repetition_limit() -> u32 {
    DEFAULT_REPETITION_LIMIT
}

impl AgentConfig {
    /// Every problem with this configuration, by field.
    pub fn problems(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let name_ok = {
            let b = self.name.as_bytes();
            (1..=63).contains(&b.len())
                && b[0].is_ascii_alphanumeric()
                && b.iter().all(|c| {
                    c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-' || *c == b'_'
                })
        };
        if !name_ok {
            out.push((
                "name".into(),
                "use 1-63 lowercase letters, digits, '-' and '_', starting with a letter or digit"
                    .into(),
            ));
        }
        if self.provider.trim().is_empty() {
            out.push(("provider".into(), "must not be empty".into()));
        }
        if self.model.trim().is_empty() || self.model.len() > 200 {
            out.push(("model".into(), "must be 1-200 characters".into()));
        }
        if let Some(fast) = &self.fast_model
            && (fast.trim().is_empty() || fast.len() > 200)
        {
            out.push(("fast_model".into(), "must be 1-200 characters".into()));
        }
        if self.fast_provider.is_some() && self.fast_model.is_none() {
            out.push((
                "fast_provider".into(),
                "names the provider of fast_model, which is unset".into(),
            ));
        }
        if !(1..=MAX_MAX_TURNS).contains(&self.max_turns) {
            out.push(("max_turns".into(), format!("must be 1-{MAX_MAX_TURNS}")));
        }
        if self.repetition_limit < 2 {
            out.push(("repetition_limit".into(), "must be at least 2".into()));
        }
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            out.push(("temperature".into(), "must be between 0 and 2".into()));
        }
        if self.tool_timeout_ms == Some(0) {
            out.push(("tool_timeout_ms".into(), "must be at least 1".into()));
        }
        if self.max_tokens == Some(0) {
            out.push(("max_tokens".into(), "must be at least 1".into()));
        }
        if let Some(schema) = &self.output_schema
            && let Err(e) = crate::output::OutputSchema::new(schema)
        {
            out.push(("output_schema".into(), e));
        }
        if self.output_retries > MAX_OUTPUT_RETRIES {
            out.push((
                "output_retries".into(),
                format!("must be 0-{MAX_OUTPUT_RETRIES}"),
            ));
        }
        if let Err(e) = Toolset::only(&self.tools, &self.categories) {
            out.push(("tools".into(), e.to_string()));
        }
        // Accepted and ignored, it read as protection and was none: an agent's approval
        // rules are the tenant policy's rules naming it.
        if self.approval_policy.is_some() {
            out.push((
                "approval_policy".into(),
                format!(
                    "is not applied per agent; add a rule with \"agent\": \"{}\" to the tenant's policy (PUT /v1/policy)",
                    self.name
                ),
            ));
        }
        out
    }

    /// The agent's own toolset (before intersecting with the caller's).
    pub fn toolset(&self) -> Result<Toolset, String> {
        Toolset::only(&self.tools, &self.categories).map_err(|e| e.to_string())
    }

    /// The compiled output schema, when the agent has one (checked by `problems`).
    pub fn output(&self) -> Option<crate::output::OutputSchema> {
        crate::output::OutputSchema::new(self.output_schema.as_ref()?).ok()
    }

    pub fn tool_timeout(&self) -> Option<Duration> {
        self.tool_timeout_ms.map(Duration::from_millis)
    }
}

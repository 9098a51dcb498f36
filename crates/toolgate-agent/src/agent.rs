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

/// What an agent is, as stored and as sent over REST. Unknown fields are refused; a
/// field left out or sent as `null` takes its default.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = AgentBody))]
#[cfg_attr(feature = "openapi", schema(example = json!({
    "name": "researcher",
    "provider": "openai",
    "model": "gpt-4.1-mini",
    "system_prompt": "You answer questions about the workspace.",
    "tools": ["read_file", "search_files"]
})))]
#[serde(deny_unknown_fields)]
pub struct AgentConfig {
    /// `^[a-z0-9][a-z0-9_-]{0,62}$`, unique in the tenant.
    pub name: String,
    /// A provider configured on the gateway (`[providers.<name>]`).
    pub provider: String,
    pub model: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Tool names or globs. With `categories` both empty, the agent has no tools.
    /// Always intersected with the caller's own tools. At most 256 of each, names and
    /// globs of at most 128 bytes.
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 256))]
    pub tools: Vec<String>,
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(max_items = 256))]
    pub categories: Vec<String>,
    /// `native` (the provider's function calling), `react` or `xml` (text protocols for
    /// models without function calling).
    #[serde(default)]
    #[cfg_attr(feature = "openapi", schema(value_type = String, example = "native"))]
    pub protocol: Protocol,
    /// 1–100, default 10.
    #[serde(default = "default_max_turns", deserialize_with = "max_turns")]
    #[cfg_attr(feature = "openapi", schema(nullable))]
    pub max_turns: u32,
    /// Off: one tool call per turn; extra calls are answered "not executed". Default on.
    #[serde(default = "default_true", deserialize_with = "parallel_tool_calls")]
    #[cfg_attr(feature = "openapi", schema(nullable))]
    pub parallel_tool_calls: bool,
    /// Each tool call's deadline in milliseconds (clamped to the tool's maximum); the
    /// tool's default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Identical consecutive tool calls (same tool, same arguments) allowed before the
    /// next is refused (default 3); the run ends if the model insists.
    #[serde(
        default = "default_repetition_limit",
        deserialize_with = "repetition_limit"
    )]
    #[cfg_attr(feature = "openapi", schema(nullable))]
    pub repetition_limit: u32,
    /// Structured output: a JSON Schema (root `"type": "object"`) the final answer must
    /// match. The model is told it (natively where the provider can), every answer is
    /// validated, and a mismatch goes back to the model up to `output_retries` times
    /// before the run fails; the run's `output_json` holds the answer as JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub output_schema: Option<serde_json::Value>,
    /// Model routing: a faster (cheaper) model for the steps that need no tools. The first
    /// turn asks it, tools declared: an answer without tool calls ends the run; a reply
    /// that calls tools is not run but routed (a `model_routed` step) and the turn asked
    /// of `model`, which handles every tool-using turn; answers the gateway asks for
    /// without tools (turn limit, a persisting repetition, calls that all failed) go to
    /// it as well. Each `model_message` step says which model answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_model: Option<String>,
    /// The provider of `fast_model` (default: `provider`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fast_provider: Option<String>,
    /// Stream the model's replies: text and reasoning reach `GET /v1/runs/{id}/events`
    /// as `model_delta` events while they are generated, before each whole
    /// `model_message` step (default off).
    #[serde(default, deserialize_with = "stream")]
    #[cfg_attr(feature = "openapi", schema(nullable))]
    pub stream: bool,
    /// Answers not matching `output_schema` sent back for another try before the run
    /// fails (0–5, default 2).
    #[serde(
        default = "default_output_retries",
        deserialize_with = "output_retries"
    )]
    #[cfg_attr(feature = "openapi", schema(nullable))]
    pub output_retries: u32,
    /// Not supported: refused with a pointer to the tenant policy's `agent` rules. Kept
    /// so that a request naming it hears where its rules belong, and agents stored
    /// before still load.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "openapi", schema(value_type = Option<Object>))]
    pub approval_policy: Option<serde_json::Value>,
}

/// A field sent as `null` reads as its default, as a field left out does.
fn or_default<'de, D, T>(d: D, default: fn() -> T) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_else(default))
}

fn max_turns<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    or_default(d, default_max_turns)
}

fn parallel_tool_calls<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    or_default(d, default_true)
}

fn repetition_limit<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    or_default(d, default_repetition_limit)
}

fn stream<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    or_default(d, bool::default)
}

fn output_retries<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    or_default(d, default_output_retries)
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// REST clients leave optional fields out or send them as `null`; both read as the
    /// defaults, and what is sent is kept.
    #[test]
    fn a_field_sent_as_null_takes_its_default() {
        let base = json!({"name": "a", "provider": "p", "model": "m"});
        let left_out: AgentConfig = serde_json::from_value(base.clone()).expect("left out");
        let mut nulls = base.clone();
        for field in [
            "max_turns",
            "parallel_tool_calls",
            "repetition_limit",
            "stream",
            "output_retries",
        ] {
            nulls[field] = serde_json::Value::Null;
        }
        let sent_null: AgentConfig = serde_json::from_value(nulls).expect("nulls");
        assert_eq!(sent_null, left_out);
        assert_eq!(
            (
                left_out.max_turns,
                left_out.parallel_tool_calls,
                left_out.stream
            ),
            (DEFAULT_MAX_TURNS, true, false)
        );
        assert_eq!(
            (left_out.repetition_limit, left_out.output_retries),
            (DEFAULT_REPETITION_LIMIT, DEFAULT_OUTPUT_RETRIES)
        );
        let mut given = base;
        given["max_turns"] = json!(4);
        given["stream"] = json!(true);
        let given: AgentConfig = serde_json::from_value(given).expect("given");
        assert_eq!((given.max_turns, given.stream), (4, true));
        let unknown = json!({"name": "a", "provider": "p", "model": "m", "turns": 4});
        assert!(serde_json::from_value::<AgentConfig>(unknown).is_err());
    }
}

//! The conversation in neutral form: what every provider module translates to and from.
//!
//! A run's history is a list of [`Message`]s folded from its journal. Provider-native
//! content that must be echoed back unchanged (Anthropic `thinking` blocks with their
//! signatures, Gemini `thoughtSignature`s) rides along in [`Message::Assistant::native`],
//! so no provider detail is lost between turns.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// One entry of the history sent to the model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// The caller's input.
    User { text: String },
    /// What the model said: text, tool calls, reasoning.
    Assistant(AssistantMessage),
    /// One result for every call of the preceding assistant message, in call order.
    ToolResults { results: Vec<ToolResult> },
    /// The gateway speaking to the model (repetition stop, "all tools failed", "answer
    /// now"): sent as user text, after any tool results.
    Note { text: String },
}

/// A model's reply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantMessage {
    /// Visible text (for text protocols: the whole reply, calls included, verbatim).
    #[serde(default)]
    pub text: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Reasoning or thinking text, where the provider returns it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    /// The provider's own rendering of this message, echoed back as received when the
    /// next request goes to the same wire format (`{"format": …, "value": …}`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<NativeContent>,
}

/// Provider-native content of one assistant message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NativeContent {
    pub format: String,
    pub value: Value,
}

impl AssistantMessage {
    /// A reply decoded from a wire format that keeps its own content blocks (`blocks`,
    /// kept as `native` under `format` to be sent back as they came). Empty `reasoning`
    /// is none.
    pub(crate) fn with_blocks(
        format: &str,
        blocks: Vec<Value>,
        text: String,
        tool_calls: Vec<ToolCall>,
        reasoning: String,
    ) -> Self {
        Self {
            text,
            tool_calls,
            reasoning: (!reasoning.is_empty()).then_some(reasoning),
            native: Some(NativeContent {
                format: format.to_owned(),
                value: Value::Array(blocks),
            }),
        }
    }
}

/// One tool call the model asked for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's call id, or one the gateway made up (`call_<n>`) when the wire has
    /// none (Gemini, older Ollama, text protocols).
    pub id: String,
    /// Whether `id` came from the provider (and so goes back to it with the result).
    #[serde(default)]
    pub provider_id: bool,
    /// The gateway's tool name (wire names are mapped back).
    pub name: String,
    /// The arguments object; when the model sent something unparsable, its raw text as a
    /// JSON string, with `malformed` saying what is wrong.
    pub arguments: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub malformed: Option<String>,
}

impl ToolCall {
    /// A call whose arguments arrived as JSON text (OpenAI's wire, text protocols).
    pub fn from_text(id: String, provider_id: bool, name: String, raw: &str) -> ToolCall {
        let trimmed = raw.trim();
        let parsed = if trimmed.is_empty() {
            Ok(Value::Object(Default::default()))
        } else {
            serde_json::from_str::<Value>(trimmed).map_err(|e| e.to_string())
        };
        let (arguments, malformed) = match parsed {
            Ok(v @ Value::Object(_)) => (v, None),
            Ok(other) => (
                Value::String(raw.to_owned()),
                Some(format!(
                    "arguments must be a JSON object, not {}",
                    json_kind(&other)
                )),
            ),
            Err(e) => (
                Value::String(raw.to_owned()),
                Some(format!("arguments are not valid JSON: {e}")),
            ),
        };
        ToolCall {
            id,
            provider_id,
            name,
            arguments,
            malformed,
        }
    }

    /// A call whose arguments arrived as a JSON value (Anthropic, Gemini, Ollama).
    pub fn from_value(id: String, provider_id: bool, name: String, args: Value) -> ToolCall {
        match args {
            Value::Object(_) => ToolCall {
                id,
                provider_id,
                name,
                arguments: args,
                malformed: None,
            },
            Value::Null => ToolCall {
                id,
                provider_id,
                name,
                arguments: Value::Object(Default::default()),
                malformed: None,
            },
            // Some servers send OpenAI-style string arguments on an object-typed wire.
            Value::String(raw) => ToolCall::from_text(id, provider_id, name, &raw),
            other => {
                let malformed =
                    format!("arguments must be a JSON object, not {}", json_kind(&other));
                ToolCall {
                    id,
                    provider_id,
                    name,
                    arguments: Value::String(other.to_string()),
                    malformed: Some(malformed),
                }
            }
        }
    }

    /// The arguments as JSON text, as OpenAI's wire carries them.
    pub fn arguments_text(&self) -> String {
        match &self.arguments {
            Value::String(raw) if self.malformed.is_some() => raw.clone(),
            other => other.to_string(),
        }
    }

    /// Name plus key-sorted arguments: two calls with the same signature do the same.
    pub fn signature(&self) -> String {
        format!(
            "{}\u{0}{}",
            self.name,
            toolgate_core::audit::canonical_json(&self.arguments)
        )
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The outcome of one call, as the model reads it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub call_id: String,
    #[serde(default)]
    pub provider_id: bool,
    pub name: String,
    /// Text for the model: the tool's output, or a JSON error object.
    pub content: String,
    pub is_error: bool,
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn signature_ignores_key_order_and_whitespace() {
        let a = ToolCall::from_text(
            "1".into(),
            true,
            "t".into(),
            r#"{"b":1, "a":{"y":2,"x":1}}"#,
        );
        let b = ToolCall::from_value(
            "2".into(),
            true,
            "t".into(),
            json!({"a":{"x":1,"y":2},"b":1}),
        );
        assert_eq!(a.signature(), b.signature());
        let c = ToolCall::from_value(
            "3".into(),
            true,
            "t".into(),
            json!({"a":{"x":1,"y":3},"b":1}),
        );
        assert_ne!(a.signature(), c.signature());
    }

    #[test]
    fn unparsable_or_non_object_arguments_are_marked_not_lost() {
        let bad = ToolCall::from_text("1".into(), true, "t".into(), r#"{"city": "#);
        assert!(
            bad.malformed
                .as_deref()
                .unwrap_or("")
                .contains("not valid JSON")
        );
        assert_eq!(bad.arguments_text(), r#"{"city": "#);
        let list = ToolCall::from_text("1".into(), true, "t".into(), "[1]");
        assert!(list.malformed.as_deref().unwrap_or("").contains("an array"));
        let empty = ToolCall::from_text("1".into(), true, "t".into(), "  ");
        assert_eq!(empty.arguments, json!({}));
        assert!(empty.malformed.is_none());
    }
}

//! Text tool-call protocols, for models without native function calling.
//!
//! The tools are described in the system prompt (generated from their specs), the model
//! writes calls as text, and the gateway parses them; results go back as a user message,
//! since a text-only model has no tool role. The model's text stays verbatim in history.
//!
//! - [`react`]: `TOOL_CALL: name` / `ARGUMENTS: {json}` / `FINAL_ANSWER: …` lines.
//! - [`xml`]: `<tool_name><param>value</param></tool_name>` blocks (and the Hermes/Qwen
//!   `<tool_call>{"name":…,"arguments":…}</tool_call>` form, which local models emit).
//!
//! Parsers never fail: a call they cannot read becomes a [`ToolCall`] marked malformed,
//! which the loop answers with an error result naming what to fix.

pub mod react;
pub mod xml;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::message::{AssistantMessage, Message, ToolCall, ToolResult};
use crate::provider::ToolDecl;

/// How an agent's model calls tools.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// The provider's own function calling.
    #[default]
    Native,
    /// ReAct lines.
    React,
    /// XML-style tags.
    Xml,
}

/// What a text reply holds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    pub calls: Vec<ToolCall>,
    /// The answer, when the reply gives one and makes no calls.
    pub final_answer: Option<String>,
}

impl Protocol {
    pub fn is_text(self) -> bool {
        self != Protocol::Native
    }

    /// The system prompt: the agent's own, then how to call the tools and which exist.
    pub fn system_prompt(self, base: Option<&str>, tools: &[ToolDecl]) -> Option<String> {
        let instructions = match self {
            Protocol::Native => return base.map(str::to_owned),
            Protocol::React => react::instructions(tools),
            Protocol::Xml => xml::instructions(tools),
        };
        Some(match base {
            Some(base) if !base.trim().is_empty() => format!("{base}\n\n{instructions}"),
            _ => instructions,
        })
    }

    /// Reads the calls (ids `{id_prefix}{n}`) and the final answer out of a reply.
    pub fn parse(self, text: &str, tools: &[ToolDecl], id_prefix: &str) -> Parsed {
        let mut parsed = match self {
            Protocol::Native => Parsed {
                calls: Vec::new(),
                final_answer: Some(text.to_owned()),
            },
            Protocol::React => react::parse(text),
            Protocol::Xml => xml::parse(text, tools),
        };
        for (n, call) in parsed.calls.iter_mut().enumerate() {
            call.id = format!("{id_prefix}{n}");
            call.provider_id = false;
            call.name = tools
                .iter()
                .find(|t| t.wire_name == call.name)
                .map_or(call.name.clone(), |t| t.name.clone());
        }
        parsed
    }

    /// The history as a text-only model sees it: its replies verbatim, tool results as
    /// user text.
    pub fn text_history(self, messages: &[Message]) -> Vec<Message> {
        messages
            .iter()
            .map(|m| match m {
                Message::Assistant(a) => Message::Assistant(AssistantMessage {
                    text: a.text.clone(),
                    ..Default::default()
                }),
                Message::ToolResults { results } => Message::Note {
                    text: self.render_results(results),
                },
                other => other.clone(),
            })
            .collect()
    }

    fn render_results(self, results: &[ToolResult]) -> String {
        let mut out = String::new();
        for r in results {
            if !out.is_empty() {
                out.push('\n');
            }
            match self {
                Protocol::Xml => {
                    let status = if r.is_error { "error" } else { "ok" };
                    out.push_str(&format!(
                        "<tool_result name=\"{}\" call=\"{}\" status=\"{status}\">\n{}\n</tool_result>",
                        r.name, r.call_id, r.content
                    ));
                }
                Protocol::React | Protocol::Native => {
                    let status = if r.is_error { " ERROR" } else { "" };
                    out.push_str(&format!(
                        "TOOL_RESULT {} (call {}){status}: {}",
                        r.name, r.call_id, r.content
                    ));
                }
            }
        }
        out
    }
}

/// "Available tools:" and, per tool, its wire name, description and parameters
/// (`no_arguments` when it takes none).
fn describe_tools(out: &mut String, tools: &[ToolDecl], no_arguments: &str) {
    out.push_str("Available tools:\n");
    for t in tools {
        out.push_str(&format!("\n## {}\n{}\n", t.wire_name, t.description));
        let params = describe_parameters(&t.parameters);
        if params.is_empty() {
            out.push_str(&format!("Arguments: {no_arguments}\n"));
        } else {
            out.push_str("Arguments:\n");
            for p in params {
                out.push_str(&p);
                out.push('\n');
            }
        }
    }
}

/// One line per parameter: name, type, required, description.
fn describe_parameters(schema: &Value) -> Vec<String> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    props
        .iter()
        .map(|(name, prop)| {
            let kind = prop.get("type").map_or("any".to_owned(), |t| match t {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            });
            let req = if required.contains(&name.as_str()) {
                ", required"
            } else {
                ""
            };
            match prop.get("description").and_then(Value::as_str) {
                Some(d) => format!("- {name} ({kind}{req}): {d}"),
                None => format!("- {name} ({kind}{req})"),
            }
        })
        .collect()
}

/// A call the model wrote but that could not be read, kept so the model is told what is
/// wrong (`problem`) and how to write it again (`resend_as`, the protocol's call syntax).
/// Its text, cut to 2,000 characters, stands in for the arguments.
fn malformed_call(name: &str, raw: &str, problem: &str, resend_as: &str) -> ToolCall {
    ToolCall {
        id: String::new(),
        provider_id: false,
        name: name.to_owned(),
        arguments: Value::String(raw.chars().take(2000).collect()),
        malformed: Some(format!("{problem}; resend the call as {resend_as}")),
    }
}

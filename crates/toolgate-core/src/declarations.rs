//! A toolset rendered as each provider's tool declarations, generated from the specs so
//! no hand-kept `tools.json` can drift from what the gateway runs.
//!
//! Wire shapes (see `shared/AGENT-NOTES.md` §3):
//! - OpenAI chat completions (and Ollama, OpenRouter, vLLM…):
//!   `[{"type":"function","function":{"name","description","parameters"}}]`
//! - Anthropic Messages: `[{"name","description","input_schema"}]`
//! - Gemini `generateContent`: `[{"functionDeclarations":[{"name","description","parameters"}]}]`,
//!   with `parameters` reduced to the OpenAPI subset Gemini accepts
//! - MCP `tools/list`: `[{"name","title","description","inputSchema","outputSchema","annotations"}]`

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::ToolSpec;

/// A provider's declaration format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeclarationFormat {
    Openai,
    Anthropic,
    Gemini,
    Mcp,
}

/// Renders `specs` as `format`'s declarations.
pub fn render<'a>(
    format: DeclarationFormat,
    specs: impl IntoIterator<Item = &'a ToolSpec>,
) -> Value {
    let specs = specs.into_iter();
    match format {
        DeclarationFormat::Openai => Value::Array(specs.map(openai).collect()),
        DeclarationFormat::Anthropic => Value::Array(specs.map(anthropic).collect()),
        DeclarationFormat::Gemini => {
            json!([{ "functionDeclarations": specs.map(gemini).collect::<Vec<_>>() }])
        }
        DeclarationFormat::Mcp => Value::Array(specs.map(mcp).collect()),
    }
}

/// What each provider's declaration says of a tool: the name the model calls it by, what
/// it does, and its arguments' schema. From a [`ToolSpec`], or from a name the agent
/// adapter has made wire-safe.
#[derive(Clone, Copy, Debug)]
pub struct Declared<'a> {
    pub name: &'a str,
    pub description: &'a str,
    pub parameters: &'a Value,
}

impl<'a> From<&'a ToolSpec> for Declared<'a> {
    fn from(spec: &'a ToolSpec) -> Self {
        Self {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.input_schema,
        }
    }
}

/// OpenAI chat completions (and Ollama, OpenRouter, vLLM…).
pub fn openai<'a>(tool: impl Into<Declared<'a>>) -> Value {
    let tool = tool.into();
    json!({
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        }
    })
}

/// Anthropic Messages.
pub fn anthropic<'a>(tool: impl Into<Declared<'a>>) -> Value {
    let tool = tool.into();
    json!({
        "name": tool.name,
        "description": tool.description,
        "input_schema": tool.parameters,
    })
}

/// One of Gemini's `functionDeclarations`.
pub fn gemini<'a>(tool: impl Into<Declared<'a>>) -> Value {
    let tool = tool.into();
    json!({
        "name": tool.name,
        "description": tool.description,
        "parameters": gemini_schema(tool.parameters),
    })
}

/// MCP `Tool` object, with annotations derived from the tool's risk and effects.
pub fn mcp(spec: &ToolSpec) -> Value {
    let mut tool = json!({
        "name": spec.name,
        "description": spec.description,
        "inputSchema": spec.input_schema,
        "annotations": mcp_annotations(spec),
    });
    if let Some(title) = &spec.title {
        tool["title"] = json!(title);
    }
    if let Some(output) = &spec.output_schema {
        tool["outputSchema"] = output.clone();
    }
    tool
}

/// `readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`.
pub fn mcp_annotations(spec: &ToolSpec) -> Value {
    let mut annotations = json!({
        "readOnlyHint": !spec.effects.writes,
        "destructiveHint": spec.effects.destructive,
        "idempotentHint": spec.effects.idempotent,
        "openWorldHint": spec.effects.open_world,
    });
    if let Some(title) = &spec.title {
        annotations["title"] = json!(title);
    }
    annotations
}

/// Keywords Gemini's OpenAPI-subset `Schema` accepts; others are dropped.
const GEMINI_KEYWORDS: &[&str] = &[
    "type",
    "format",
    "title",
    "description",
    "nullable",
    "enum",
    "items",
    "maxItems",
    "minItems",
    "properties",
    "required",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "example",
    "anyOf",
    "propertyOrdering",
    "default",
    "minimum",
    "maximum",
];

/// Reduces a JSON Schema to what Gemini accepts: unknown keywords dropped, `const` turned
/// into a one-value `enum`, `"type": [T, "null"]` into `T` with `nullable`.
pub fn gemini_schema(schema: &Value) -> Value {
    let Value::Object(obj) = schema else {
        return schema.clone();
    };
    let mut out = Map::new();
    for (key, value) in obj {
        match key.as_str() {
            "properties" => {
                let props = value
                    .as_object()
                    .map(|p| {
                        p.iter()
                            .map(|(k, v)| (k.clone(), gemini_schema(v)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Object(props));
            }
            "items" => {
                out.insert(key.clone(), gemini_schema(value));
            }
            "anyOf" => {
                let variants = value
                    .as_array()
                    .map(|v| v.iter().map(gemini_schema).collect())
                    .unwrap_or_default();
                out.insert(key.clone(), Value::Array(variants));
            }
            "const" => {
                out.insert("enum".into(), json!([value]));
            }
            "type" => match value {
                Value::Array(types) => {
                    let non_null: Vec<&Value> = types.iter().filter(|t| *t != "null").collect();
                    if non_null.len() < types.len() {
                        out.insert("nullable".into(), json!(true));
                    }
                    if let Some(first) = non_null.first() {
                        out.insert("type".into(), (*first).clone());
                    }
                }
                other => {
                    out.insert(key.clone(), other.clone());
                }
            },
            k if GEMINI_KEYWORDS.contains(&k) => {
                out.insert(key.clone(), value.clone());
            }
            _ => {}
        }
    }
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Effects, Risk};

    fn spec() -> ToolSpec {
        ToolSpec::new(
            "read_file",
            "Read a file",
            json!({
                "$schema": "https://json-schema.org/draft/2020-12/schema",
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "mode": {"const": "text"},
                    "limit": {"type": ["integer", "null"]}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        )
        .with_title("Read file")
        .with_risk(
            Risk::Medium,
            Effects {
                writes: true,
                destructive: true,
                idempotent: false,
                open_world: false,
            },
        )
    }

    #[test]
    fn each_format_has_its_providers_shape() {
        let s = spec();
        let openai = render(DeclarationFormat::Openai, [&s]);
        assert_eq!(openai[0]["type"], "function");
        assert_eq!(openai[0]["function"]["name"], "read_file");
        assert_eq!(openai[0]["function"]["parameters"], s.input_schema);

        let anthropic = render(DeclarationFormat::Anthropic, [&s]);
        assert_eq!(anthropic[0]["input_schema"], s.input_schema);

        let mcp = render(DeclarationFormat::Mcp, [&s]);
        assert_eq!(mcp[0]["inputSchema"], s.input_schema);
        assert_eq!(mcp[0]["title"], "Read file");
        assert_eq!(mcp[0]["annotations"]["readOnlyHint"], false);
        assert_eq!(mcp[0]["annotations"]["destructiveHint"], true);
    }

    #[test]
    fn gemini_parameters_use_the_openapi_subset() {
        let gemini = render(DeclarationFormat::Gemini, [&spec()]);
        let params = &gemini[0]["functionDeclarations"][0]["parameters"];
        assert!(params.get("$schema").is_none());
        assert!(params.get("additionalProperties").is_none());
        assert_eq!(params["properties"]["mode"]["enum"], json!(["text"]));
        assert_eq!(params["properties"]["limit"]["type"], "integer");
        assert_eq!(params["properties"]["limit"]["nullable"], true);
        assert_eq!(params["required"], json!(["path"]));
    }
}

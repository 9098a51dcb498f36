//! Structured output: a JSON Schema an agent's final answer must match.
//!
//! The model is told the schema in its system prompt and, where its wire format has a
//! native constraint that works alongside tools, given it there too
//! ([`crate::provider::ModelRequest::output_schema`]). Either way every final answer is
//! checked here: parsed (a Markdown code fence around it is tolerated) and validated. A
//! mismatch goes back to the model with what is wrong, up to the agent's
//! `output_retries` times; then the run fails, keeping the last answer.

use serde_json::Value;

/// A compiled output schema.
pub struct OutputSchema {
    schema: Value,
    validator: jsonschema::Validator,
}

impl OutputSchema {
    /// The schema, if it is one the providers accept: a valid JSON Schema whose root is
    /// an object (OpenAI's `response_format` and Anthropic's `output_config` want one).
    pub fn new(schema: &Value) -> Result<OutputSchema, String> {
        if schema.get("type").and_then(Value::as_str) != Some("object") {
            return Err(r#"must be a JSON Schema with "type": "object" at its root"#.into());
        }
        let validator = toolgate_core::schema_validator(schema)
            .map_err(|e| format!("is not a valid JSON Schema: {e}"))?;
        Ok(OutputSchema {
            schema: schema.clone(),
            validator,
        })
    }

    pub fn schema(&self) -> &Value {
        &self.schema
    }

    /// What the system prompt says about the answer.
    pub fn instruction(&self) -> String {
        format!(
            "When you give your final answer, reply with only a JSON value that matches this JSON Schema, with no other text and no code fence:\n{}",
            self.schema
        )
    }

    /// The answer as the JSON value it must be, or what is wrong with it (every
    /// violation, with its JSON pointer).
    pub fn check(&self, answer: &str) -> Result<Value, String> {
        let value: Value = serde_json::from_str(json_text(answer))
            .map_err(|e| format!("the answer is not JSON ({e})"))?;
        let problems: Vec<String> = self
            .validator
            .iter_errors(&value)
            .map(|e| {
                let at = e.instance_path().to_string();
                format!("at \"{at}\": {e}")
            })
            .collect();
        if problems.is_empty() {
            Ok(value)
        } else {
            Err(format!(
                "the answer does not match the output schema: {}",
                problems.join("; ")
            ))
        }
    }
}

/// The JSON in an answer: itself, trimmed, or what a Markdown code fence holds.
fn json_text(answer: &str) -> &str {
    let trimmed = answer.trim();
    let Some(rest) = trimmed.strip_prefix("```") else {
        return trimmed;
    };
    let Some(inner) = rest.strip_suffix("```") else {
        return trimmed;
    };
    // The fence's info string (`json`) ends its first line.
    inner
        .split_once('\n')
        .map_or(inner, |(_, body)| body)
        .trim()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn schema() -> OutputSchema {
        OutputSchema::new(&json!({
            "type": "object",
            "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
            "required": ["city", "days"],
        }))
        .expect("schema")
    }

    #[test]
    fn an_answer_matching_the_schema_is_its_value_fenced_or_not() {
        let want = json!({"city": "Oslo", "days": 3});
        assert_eq!(
            schema().check(r#" {"city": "Oslo", "days": 3} "#),
            Ok(want.clone())
        );
        assert_eq!(
            schema().check("```json\n{\"city\": \"Oslo\", \"days\": 3}\n```"),
            Ok(want)
        );
    }

    #[test]
    fn a_mismatch_says_what_is_wrong_and_where() {
        let why = schema()
            .check(r#"{"city": "Oslo", "days": 0}"#)
            .expect_err("minimum");
        assert!(why.contains("\"/days\""), "{why}");
        let why = schema().check(r#"{"days": 2}"#).expect_err("required");
        assert!(why.contains("city"), "{why}");
        let why = schema()
            .check("Oslo, for three days")
            .expect_err("not JSON");
        assert!(why.starts_with("the answer is not JSON"), "{why}");
    }

    #[test]
    fn only_object_schemas_that_compile_are_accepted() {
        assert!(OutputSchema::new(&json!({"type": "string"})).is_err());
        assert!(OutputSchema::new(&json!({"type": "object", "minProperties": "x"})).is_err());
        // A model's answer is matched in linear time: no backtracking patterns.
        let lookahead = json!({
            "type": "object",
            "properties": {"code": {"type": "string", "pattern": "^(?=.*\\d)\\w+$"}},
        });
        let why = OutputSchema::new(&lookahead).err().expect("refused");
        assert!(why.contains("lookaround"), "{why}");
    }
}

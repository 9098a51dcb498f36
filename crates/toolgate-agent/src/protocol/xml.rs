//! XML-style tool calls (the Cline/Roo heritage):
//!
//! ```text
//! <get_weather>
//! <city>Paris</city>
//! <days>3</days>
//! </get_weather>
//! ```
//!
//! Only a tag named after one of the agent's tools opens a call, so prose and HTML pass
//! through. Parameters are the tool's declared properties; a value runs to the *last*
//! closing tag of its name inside the block, so a file's content may hold its own
//! `</content>`. Values are text, coerced by the schema (`"3"` → 3, `"true"` → true, JSON
//! for objects and arrays). The Hermes/Qwen form `<tool_call>{"name": …, "arguments":
//! {…}}</tool_call>` is read too. A block with no closing tag is a malformed call.

use serde_json::{Map, Value};

use super::react::extract_object;
use super::{Parsed, describe_tools};
use crate::message::ToolCall;
use crate::provider::ToolDecl;

pub fn instructions(tools: &[ToolDecl]) -> String {
    let mut out = String::from(
        "You can call tools. To call one, write its name as an XML tag holding one tag per argument:\n\
         <tool_name>\n<argument_name>value</argument_name>\n</tool_name>\n\
         Objects and arrays are written as JSON inside their tag. You may call several tools in one message. \
         Then stop: the results come back in the next message inside <tool_result> tags; never write those yourself.\n\
         When you have the answer, write it as plain text without any tool tags.\n\n",
    );
    if tools.is_empty() {
        out.push_str("No tools are available: answer in plain text.\n");
        return out;
    }
    describe_tools(&mut out, tools, "none");
    out
}

pub fn parse(text: &str, tools: &[ToolDecl]) -> Parsed {
    let mut calls = Vec::new();
    let mut pos = 0;
    while let Some(open_at) = text[pos..].find('<').map(|i| pos + i) {
        let rest = &text[open_at + 1..];
        let Some(close) = rest.find('>') else { break };
        let tag = &rest[..close];
        let body_start = open_at + 1 + close + 1;
        // A result the model wrote itself after its calls: invented, and what follows it
        // too. Before any call it is only text (an answer may quote the tag).
        if tag.starts_with("tool_result") {
            if !calls.is_empty() {
                break;
            }
            pos = open_at + 1;
            continue;
        }
        if tag == "tool_call" {
            let (call, end) = hermes(text, body_start);
            calls.push(call);
            pos = end;
            continue;
        }
        let Some(tool) = tools.iter().find(|t| t.wire_name == tag) else {
            pos = open_at + 1;
            continue;
        };
        let closing = format!("</{tag}>");
        let Some(body_len) = text[body_start..].find(&closing) else {
            calls.push(malformed(
                tag,
                &text[body_start..],
                &format!("the <{tag}> block has no closing </{tag}> tag"),
            ));
            break;
        };
        let body = &text[body_start..body_start + body_len];
        calls.push(read_params(tool, body));
        pos = body_start + body_len + closing.len();
    }
    let final_answer = calls.is_empty().then(|| text.trim().to_owned());
    Parsed {
        calls,
        final_answer,
    }
}

fn read_params(tool: &ToolDecl, body: &str) -> ToolCall {
    let props = tool.parameters.get("properties").and_then(Value::as_object);
    let mut args = Map::new();
    let mut problems = Vec::new();
    for (name, schema) in props.into_iter().flatten() {
        let open = format!("<{name}>");
        let close = format!("</{name}>");
        let Some(start) = body.find(&open).map(|i| i + open.len()) else {
            continue;
        };
        let Some(end) = body.rfind(&close).filter(|&e| e >= start) else {
            problems.push(format!("<{name}> has no closing </{name}> tag"));
            continue;
        };
        match coerce(&body[start..end], schema) {
            Ok(v) => {
                args.insert(name.clone(), v);
            }
            Err(e) => problems.push(format!("<{name}>: {e}")),
        }
    }
    if problems.is_empty() {
        ToolCall::from_value(
            String::new(),
            false,
            tool.wire_name.clone(),
            Value::Object(args),
        )
    } else {
        malformed(&tool.wire_name, body, &problems.join("; "))
    }
}

/// A tag's text as the schema's type.
fn coerce(raw: &str, schema: &Value) -> Result<Value, String> {
    let kind = match schema.get("type") {
        Some(Value::String(s)) => s.as_str(),
        // ["integer", "null"] and the like: the first non-null type.
        Some(Value::Array(types)) => types
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("string"),
        _ => "string",
    };
    let trimmed = raw.trim();
    match kind {
        "integer" => trimmed
            .parse::<i64>()
            .map(Value::from)
            .map_err(|_| format!("{trimmed:?} is not an integer")),
        "number" => trimmed
            .parse::<f64>()
            .ok()
            .and_then(|n| serde_json::Number::from_f64(n).map(Value::Number))
            .ok_or_else(|| format!("{trimmed:?} is not a number")),
        "boolean" => match trimmed.to_ascii_lowercase().as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err(format!("{trimmed:?} is not true or false")),
        },
        "object" | "array" => {
            serde_json::from_str(trimmed).map_err(|e| format!("not valid JSON: {e}"))
        }
        // Strings keep their inner whitespace; only the newlines around the tags go.
        _ => {
            let s = raw
                .strip_prefix("\r\n")
                .or_else(|| raw.strip_prefix('\n'))
                .unwrap_or(raw);
            let s = s
                .strip_suffix("\r\n")
                .or_else(|| s.strip_suffix('\n'))
                .unwrap_or(s);
            Ok(Value::String(s.to_owned()))
        }
    }
}

/// `<tool_call>{"name": …, "arguments": {…}}</tool_call>` starting at `start`.
fn hermes(text: &str, start: usize) -> (ToolCall, usize) {
    let end_tag = text[start..].find("</tool_call>").map(|i| start + i);
    let region_end = end_tag.unwrap_or(text.len());
    let resume = end_tag.map_or(text.len(), |e| e + "</tool_call>".len());
    let (object, _) = extract_object(&text[..region_end], start);
    let parsed = object.and_then(|o| serde_json::from_str::<Value>(o).map_err(|e| e.to_string()));
    let call = match parsed {
        Ok(v) => match v.get("name").and_then(Value::as_str) {
            Some(name) => {
                let args = v.get("arguments").cloned().unwrap_or(Value::Null);
                ToolCall::from_value(String::new(), false, name.to_owned(), args)
            }
            None => malformed(
                "",
                &text[start..region_end],
                "the <tool_call> object has no \"name\"",
            ),
        },
        Err(e) => malformed(
            "",
            &text[start..region_end],
            &format!("the <tool_call> body is not a JSON object: {e}"),
        ),
    };
    (call, resume)
}

fn malformed(name: &str, raw: &str, problem: &str) -> ToolCall {
    super::malformed_call(
        name,
        raw,
        problem,
        "<tool_name><argument>value</argument></tool_name>",
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn tools() -> Vec<ToolDecl> {
        vec![
            ToolDecl {
                name: "fs.write".into(),
                wire_name: "fs_write".into(),
                description: "write".into(),
                parameters: json!({"type": "object", "properties": {
                    "path": {"type": "string"}, "content": {"type": "string"},
                    "mode": {"type": ["integer", "null"]}, "force": {"type": "boolean"},
                    "opts": {"type": "object"}
                }}),
            },
            ToolDecl {
                name: "ping".into(),
                wire_name: "ping".into(),
                description: "ping".into(),
                parameters: json!({"type": "object", "properties": {}}),
            },
        ]
    }

    #[test]
    fn a_tool_result_tag_in_an_answer_is_only_text_but_ends_calls() {
        let answer = "Results come back as <tool_result>…</tool_result>; here it is: 42.";
        let p = parse(answer, &tools());
        assert!(p.calls.is_empty());
        assert_eq!(p.final_answer.as_deref(), Some(answer));
        // After a call, a result the model wrote itself is invented: the rest is dropped.
        let invented = "<ping></ping>\n<tool_result>pong</tool_result>\n<ping></ping>";
        assert_eq!(parse(invented, &tools()).calls.len(), 1);
    }

    #[test]
    fn known_tools_only_with_coercion_and_content_holding_its_own_tag() {
        let text = "I'll write it. <b>bold</b>\n<fs_write>\n<path>a.html</path>\n<content>\n<p>x</content> y\n</content>\n<mode>420</mode>\n<force>TRUE</force>\n<opts>{\"a\": [1]}</opts>\n</fs_write>\nand <ping></ping>";
        let p = parse(text, &tools());
        assert_eq!(p.calls.len(), 2, "{p:?}");
        assert_eq!(
            p.calls[0].arguments,
            json!({"path": "a.html", "content": "<p>x</content> y", "mode": 420, "force": true, "opts": {"a": [1]}})
        );
        assert_eq!(p.calls[1].name, "ping");
        assert!(p.final_answer.is_none());
    }

    #[test]
    fn bad_values_and_unterminated_blocks_are_malformed() {
        let p = parse("<fs_write><mode>abc</mode></fs_write>", &tools());
        assert!(
            p.calls[0]
                .malformed
                .as_deref()
                .unwrap_or("")
                .contains("not an integer")
        );
        let p = parse("<fs_write><path>x</path>", &tools());
        assert!(
            p.calls[0]
                .malformed
                .as_deref()
                .unwrap_or("")
                .contains("no closing")
        );
    }

    #[test]
    fn hermes_tool_call_json() {
        let p = parse(
            "<tool_call>\n{\"name\": \"ping\", \"arguments\": {\"a\": {\"b\": \"}\"}}}\n</tool_call>",
            &tools(),
        );
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.calls[0].name, "ping");
        assert_eq!(p.calls[0].arguments, json!({"a": {"b": "}"}}));
        let p = parse("<tool_call>{\"arguments\": {}}</tool_call>", &tools());
        assert!(p.calls[0].malformed.is_some());
    }

    #[test]
    fn plain_text_is_the_answer() {
        let p = parse("The answer is <b>42</b>.", &tools());
        assert!(p.calls.is_empty());
        assert_eq!(p.final_answer.as_deref(), Some("The answer is <b>42</b>."));
    }

    proptest! {
        #[test]
        fn embedded_calls_round_trip(
            before in "[ -~\n]{0,60}",
            path in "[a-zA-Z0-9 ./_-]{0,20}",
            content in "[ -~\n\u{e9}]{0,60}",
            mode in any::<i32>(),
        ) {
            prop_assume!(!before.contains("<fs_write>") && !before.contains("<ping>")
                && !before.contains("<tool_call>") && !before.contains("<tool_result"));
            prop_assume!(!content.contains("<tool_result") && !content.contains("</fs_write>"));
            let text = format!("{before}\n<fs_write>\n<path>{path}</path>\n<content>{content}</content>\n<mode>{mode}</mode>\n</fs_write>");
            let p = parse(&text, &tools());
            let last = p.calls.last().cloned();
            prop_assert!(last.is_some());
            let call = last.unwrap_or_else(|| unreachable!());
            prop_assert_eq!(call.arguments["mode"].clone(), json!(mode));
            prop_assert_eq!(call.arguments["path"].clone(), json!(path.trim_matches('\n')));
        }

        #[test]
        fn arbitrary_input_never_panics(text in "(?s).{0,400}") {
            let _ = parse(&text, &tools());
            let _ = parse(&format!("<fs_write>{text}"), &tools());
            let _ = parse(&format!("<tool_call>{text}"), &tools());
        }
    }
}

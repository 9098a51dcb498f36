//! ReAct lines:
//!
//! ```text
//! THOUGHT: I need the weather.
//! TOOL_CALL: get_weather
//! ARGUMENTS: {"city": "Paris", "opts": {"units": "metric"}}
//! ```
//!
//! and `FINAL_ANSWER: …` (the rest of the message) to finish. Keys are line-anchored and
//! case-insensitive. `ARGUMENTS` is one JSON object that may span lines and may sit in a
//! code fence; it is cut out with a string- and escape-aware brace counter, so nested
//! braces and braces inside strings are fine. Several `TOOL_CALL`s make several calls.
//! Anything from a line starting `OBSERVATION:` or `TOOL_RESULT` on is ignored: models
//! like to invent their tools' results.

use serde_json::Value;

use super::{Parsed, describe_tools};
use crate::message::ToolCall;
use crate::provider::ToolDecl;

pub fn instructions(tools: &[ToolDecl]) -> String {
    let mut out = String::from(
        "You can call tools. To call one, write exactly these two lines:\n\
         TOOL_CALL: <tool name>\n\
         ARGUMENTS: <a JSON object with the tool's arguments>\n\
         You may call several tools in one message, each with its own TOOL_CALL and ARGUMENTS lines. \
         Then stop: the results come back in the next message as TOOL_RESULT lines. \
         Never write TOOL_RESULT or OBSERVATION lines yourself.\n\
         When you have the answer, write:\n\
         FINAL_ANSWER: <your answer>\n\n",
    );
    if tools.is_empty() {
        out.push_str("No tools are available: answer with FINAL_ANSWER.\n");
        return out;
    }
    describe_tools(&mut out, tools, "{}");
    out.push_str("\nExample:\nTOOL_CALL: ");
    out.push_str(&tools[0].wire_name);
    out.push_str("\nARGUMENTS: {}\n");
    out
}

/// `key` at the start of `line` (after indentation, any case), and what follows it.
fn strip_key<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let t = line.trim_start();
    let t = t.trim_start_matches(['*', '#', '>', ' ']);
    let head = t.get(..key.len())?;
    head.eq_ignore_ascii_case(key).then(|| &t[key.len()..])
}

pub fn parse(text: &str) -> Parsed {
    let mut calls = Vec::new();
    let mut final_answer = None;
    let mut pos = 0;
    while pos < text.len() {
        let line_end = text[pos..].find('\n').map_or(text.len(), |i| pos + i);
        let line = &text[pos..line_end];
        // A result the model wrote itself after its calls: invented, and what follows it
        // too. Elsewhere (an answer's text, prose) such a line is only text.
        if !calls.is_empty() && is_invented_result(line) {
            break;
        }
        if let Some(rest) = strip_key(line, "TOOL_CALL:") {
            let name = rest.trim().trim_matches(['`', '"', '\'', '*']).to_owned();
            // ARGUMENTS on a following line (blank lines allowed), or none.
            let mut next = (line_end + 1).min(text.len());
            while next < text.len() {
                let end = text[next..].find('\n').map_or(text.len(), |i| next + i);
                if text[next..end].trim().is_empty() {
                    next = (end + 1).min(text.len());
                } else {
                    break;
                }
            }
            let next_end = text[next..].find('\n').map_or(text.len(), |i| next + i);
            let next_line = &text[next..next_end];
            let (call, resume) = match strip_key(next_line, "ARGUMENTS:") {
                Some(rest) => {
                    let start = next_end - rest.len();
                    let (raw, end) = extract_object(text, start);
                    let call = match raw {
                        Ok(json) => ToolCall::from_text(String::new(), false, name.clone(), json),
                        Err(problem) => malformed(&name, &text[start..end], &problem),
                    };
                    (call, end)
                }
                None => (
                    ToolCall::from_value(String::new(), false, name.clone(), Value::Null),
                    line_end,
                ),
            };
            if name.is_empty() {
                calls.push(malformed("", "", "TOOL_CALL has no tool name"));
            } else {
                calls.push(call);
            }
            pos = resume.max(line_end);
            continue;
        }
        if let Some(rest) = strip_key(line, "FINAL_ANSWER:") {
            let after = &text[(line_end + 1).min(text.len())..];
            let answer = if after.is_empty() {
                rest.trim().to_owned()
            } else {
                format!("{}\n{}", rest.trim(), after).trim().to_owned()
            };
            final_answer = Some(answer);
            break;
        }
        pos = line_end + 1;
    }
    if calls.is_empty() && final_answer.is_none() {
        // No protocol at all: the model answered in prose.
        final_answer = Some(text.trim().to_owned());
    }
    if !calls.is_empty() {
        final_answer = None;
    }
    Parsed {
        calls,
        final_answer,
    }
}

fn malformed(name: &str, raw: &str, problem: &str) -> ToolCall {
    super::malformed_call(
        name,
        raw,
        problem,
        "TOOL_CALL: <name> then ARGUMENTS: <one JSON object>",
    )
}

/// Everything before the first line that starts an invented result.
fn is_invented_result(line: &str) -> bool {
    strip_key(line, "OBSERVATION:").is_some() || strip_key(line, "TOOL_RESULT").is_some()
}

/// The JSON object starting at or after `start` (optionally inside a ``` fence): its text,
/// or what is wrong; and where parsing stopped.
pub(crate) fn extract_object(text: &str, start: usize) -> (Result<&str, String>, usize) {
    let mut i = start + (text[start..].len() - text[start..].trim_start().len());
    let mut fence_end = None;
    if text[i..].starts_with("```") {
        // Skip the fence line (```json), and stop at the closing fence.
        let body = text[i..].find('\n').map_or(text.len(), |n| i + n + 1);
        let close = text[body..].find("```").map(|n| body + n);
        fence_end = Some(close.map_or(text.len(), |c| c + 3));
        i = body + (text[body..].len() - text[body..].trim_start().len());
    }
    let bytes = text.as_bytes();
    if bytes.get(i) != Some(&b'{') {
        let end = text[i..].find('\n').map_or(text.len(), |n| i + n);
        return (
            Err("ARGUMENTS must be one JSON object starting with {".to_owned()),
            fence_end.unwrap_or(end),
        );
    }
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for (offset, &b) in bytes[i..].iter().enumerate() {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth -= 1;
                if depth == 0 {
                    let end = i + offset + 1;
                    return (Ok(&text[i..end]), fence_end.unwrap_or(end));
                }
            }
            _ => {}
        }
    }
    (
        Err(
            "ARGUMENTS is not a complete JSON object (unbalanced braces or an open string)"
                .to_owned(),
        ),
        text.len(),
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    #[test]
    fn one_call_with_nested_braces_and_braces_in_strings() {
        let p = parse(
            "THOUGHT: look it up\nTOOL_CALL: get_weather\nARGUMENTS: {\"city\": \"Pa}ris{\", \"opts\": {\"units\": [\"metric\"]}}\n",
        );
        assert_eq!(p.calls.len(), 1);
        assert_eq!(p.calls[0].name, "get_weather");
        assert_eq!(
            p.calls[0].arguments,
            json!({"city": "Pa}ris{", "opts": {"units": ["metric"]}})
        );
        assert!(p.final_answer.is_none());
    }

    #[test]
    fn fenced_multiline_arguments_and_several_calls() {
        let text = "tool_call: a\narguments:\n```json\n{\n  \"x\": 1\n}\n```\n\nTOOL_CALL: b\nARGUMENTS: {\"y\": \"\\\"}\"}\n";
        let p = parse(text);
        assert_eq!(p.calls.len(), 2, "{p:?}");
        assert_eq!(p.calls[0].arguments, json!({"x": 1}));
        assert_eq!(p.calls[1].name, "b");
        assert_eq!(p.calls[1].arguments, json!({"y": "\"}"}));
    }

    #[test]
    fn invented_observations_are_cut() {
        let p = parse("TOOL_CALL: a\nARGUMENTS: {}\nOBSERVATION: 42\nTOOL_CALL: b\nARGUMENTS: {}");
        assert_eq!(p.calls.len(), 1);
    }

    #[test]
    fn look_alike_lines_in_an_answer_are_only_text() {
        // An answer quoting the protocol is kept whole: only a call's invented result is cut.
        let text = "FINAL_ANSWER: The log shows:\nOBSERVATION: disk full\nTOOL_RESULT: none\nDone.";
        let p = parse(text);
        assert!(p.calls.is_empty());
        assert_eq!(
            p.final_answer.as_deref(),
            Some("The log shows:\nOBSERVATION: disk full\nTOOL_RESULT: none\nDone.")
        );
        let prose = "The format has lines like\nOBSERVATION: <result>\nafter each call.";
        assert_eq!(parse(prose).final_answer.as_deref(), Some(prose));
    }

    #[test]
    fn final_answer_and_prose() {
        let p = parse("THOUGHT: done\nFINAL_ANSWER: It is 21°C.\nSecond line.");
        assert_eq!(p.final_answer.as_deref(), Some("It is 21°C.\nSecond line."));
        let p = parse("Just prose.");
        assert_eq!(p.final_answer.as_deref(), Some("Just prose."));
    }

    #[test]
    fn malformed_calls_are_reported_not_dropped() {
        let p = parse("TOOL_CALL: a\nARGUMENTS: {\"x\": ");
        assert_eq!(p.calls.len(), 1);
        assert!(
            p.calls[0]
                .malformed
                .as_deref()
                .unwrap_or("")
                .contains("not a complete")
        );
        let p = parse("TOOL_CALL: a\nARGUMENTS: x=1");
        assert!(
            p.calls[0]
                .malformed
                .as_deref()
                .unwrap_or("")
                .contains("starting with {")
        );
        let p = parse("TOOL_CALL:\nARGUMENTS: {}");
        assert!(
            p.calls[0]
                .malformed
                .as_deref()
                .unwrap_or("")
                .contains("no tool name")
        );
        let p = parse("TOOL_CALL: a\nARGUMENTS: {\"x\": tru}");
        assert!(
            p.calls[0]
                .malformed
                .as_deref()
                .unwrap_or("")
                .contains("not valid JSON")
        );
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i32>().prop_map(|n| json!(n)),
            "[ -~{}\\[\\]\"\\\\\n\t\u{e9}\u{1F600}]{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-z{}\"]{1,6}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn calls_embedded_in_prose_round_trip(
            before in "[ -~\n\u{e9}]{0,80}",
            args in prop::collection::btree_map("[a-z]{1,5}", json_value(), 0..4),
            pretty in any::<bool>(),
            fenced in any::<bool>(),
            crlf in any::<bool>(),
        ) {
            // Prose must not itself contain protocol keys.
            prop_assume!(!before.to_ascii_uppercase().contains("TOOL_CALL")
                && !before.to_ascii_uppercase().contains("FINAL_ANSWER")
                && !before.to_ascii_uppercase().contains("OBSERVATION")
                && !before.to_ascii_uppercase().contains("TOOL_RESULT"));
            let args = Value::Object(args.into_iter().collect());
            let json = if pretty { serde_json::to_string_pretty(&args).unwrap_or_default() } else { args.to_string() };
            let json = if fenced { format!("```json\n{json}\n```") } else { json };
            let mut text = format!("{before}\nTOOL_CALL: the_tool\nARGUMENTS: {json}\n");
            if crlf { text = text.replace('\n', "\r\n"); }
            let p = parse(&text);
            prop_assert_eq!(p.calls.len(), 1);
            prop_assert_eq!(&p.calls[0].name, "the_tool");
            // Newlines inside JSON strings are escaped, so CRLF only touches whitespace.
            prop_assert_eq!(&p.calls[0].arguments, &args);
        }

        #[test]
        fn arbitrary_and_truncated_input_never_panics(text in "(?s).{0,400}", cut in 0usize..400) {
            let _ = parse(&text);
            let full = format!("TOOL_CALL: t\nARGUMENTS: {text}");
            let mut end = cut.min(full.len());
            while !full.is_char_boundary(end) { end -= 1; }
            let _ = parse(&full[..end]);
        }
    }
}

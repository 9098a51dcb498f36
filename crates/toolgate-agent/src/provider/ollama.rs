//! Ollama's native chat API (`POST {base}/api/chat`, `stream: false`).
//!
//! Tool declarations as OpenAI's; calls are `message.tool_calls[{id?, function:{index,
//! name, arguments}}]` with `arguments` an **object**; results go back as one
//! `{"role":"tool","tool_name","content"}` message per call (with `tool_call_id` when the
//! call had an id). There is no `tool_choice`: to stop tool use the tools are left out.
//! Usage is `prompt_eval_count`/`eval_count`, omitted when zero.

use serde_json::{Value, json};
use toolgate_core::declarations;

use super::stream::{self, Delta, DeltaSink};
use super::{
    ModelRequest, ModelTurn, ProviderError, ProviderKind, ToolChoice, Usage, WireFormat,
    decode_error,
};
use crate::message::{AssistantMessage, Message};

/// The Ollama wire format.
pub struct Ollama;

impl WireFormat for Ollama {
    const KIND: ProviderKind = ProviderKind::Ollama;

    fn path(_request: &ModelRequest<'_>) -> String {
        "/api/chat".to_owned()
    }

    const FRAMING: stream::Framing = stream::Framing::Ndjson;
    type Fold = Fold;

    fn request_body(request: &ModelRequest<'_>) -> Value {
        let mut messages = Vec::with_capacity(request.messages.len() + 1);
        if let Some(system) = request.system {
            messages.push(json!({"role": "system", "content": system}));
        }
        for message in request.messages {
            match message {
                Message::User { text } | Message::Note { text } => {
                    messages.push(json!({"role": "user", "content": text}));
                }
                Message::Assistant(a) => {
                    let mut m = json!({"role": "assistant", "content": a.text});
                    if let Some(thinking) = &a.reasoning {
                        m["thinking"] = json!(thinking);
                    }
                    if !a.tool_calls.is_empty() {
                        m["tool_calls"] = a
                            .tool_calls
                            .iter()
                            .enumerate()
                            .map(|(index, c)| {
                                let args = if c.arguments.is_object() { c.arguments.clone() } else { json!({}) };
                                let mut call = json!({"function": {"index": index, "name": request.wire_name(&c.name), "arguments": args}});
                                if c.provider_id {
                                    call["id"] = json!(c.id);
                                }
                                call
                            })
                            .collect();
                    }
                    messages.push(m);
                }
                Message::ToolResults { results } => {
                    for r in results {
                        let mut m = json!({"role": "tool", "tool_name": request.wire_name(&r.name), "content": r.content});
                        if r.provider_id {
                            m["tool_call_id"] = json!(r.call_id);
                        }
                        messages.push(m);
                    }
                }
            }
        }
        let mut body = json!({"model": request.model, "messages": messages, "stream": false});
        if !request.tools.is_empty() && request.tool_choice == ToolChoice::Auto {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| declarations::openai(t.declared()))
                .collect();
        }
        let mut options = serde_json::Map::new();
        if let Some(t) = request.temperature {
            options.insert("temperature".into(), json!(t));
        }
        if let Some(max) = request.max_tokens {
            options.insert("num_predict".into(), json!(max));
        }
        if !options.is_empty() {
            body["options"] = Value::Object(options);
        }
        if let Some(schema) = request.output_schema {
            body["format"] = schema.clone();
        }
        body
    }

    fn decode(request: &ModelRequest<'_>, raw: Value) -> Result<ModelTurn, ProviderError> {
        let message = raw
            .get("message")
            .ok_or_else(|| decode_error("no message in the reply"))?;
        let tool_calls = super::openai::tool_calls(request, message)?;
        let count = |k: &str| raw.get(k).and_then(Value::as_u64);
        let usage = match (count("prompt_eval_count"), count("eval_count")) {
            (None, None) => None,
            (input, output) => Some(Usage {
                input_tokens: input.unwrap_or(0),
                output_tokens: output.unwrap_or(0),
                cached_input_tokens: count("prompt_eval_cached_count").unwrap_or(0),
                reasoning_tokens: 0,
            }),
        };
        Ok(ModelTurn {
            message: AssistantMessage {
                text: message
                    .get("content")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
                tool_calls,
                reasoning: message
                    .get("thinking")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned),
                native: None,
            },
            stop_reason: super::text_field(&raw, "done_reason"),
            usage,
            raw,
        })
    }
}

/// `stream: true` lines folded into the unstreamed reply: `message.content` and
/// `message.thinking` appended, `message.tool_calls` gathered; the `done: true` line
/// carries the stop reason and counts.
#[derive(Default)]
pub struct Fold {
    content: String,
    thinking: String,
    calls: Vec<Value>,
    last: Option<Value>,
}

impl stream::Fold for Fold {
    fn push(&mut self, line: Value, sink: DeltaSink<'_>) -> Result<(), ProviderError> {
        let message = line.get("message").unwrap_or(&Value::Null);
        if let Some(text) = message.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.content.push_str(text);
            sink(Delta::Text(text.to_owned()));
        }
        if let Some(text) = message.get("thinking").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.thinking.push_str(text);
            sink(Delta::Reasoning(text.to_owned()));
        }
        if let Some(calls) = message.get("tool_calls").and_then(Value::as_array) {
            self.calls.extend(calls.iter().cloned());
        }
        if line.get("done").and_then(Value::as_bool) == Some(true) {
            self.last = Some(line);
        }
        Ok(())
    }

    fn finish(self) -> Result<Value, ProviderError> {
        let Some(mut reply) = self.last else {
            return Err(stream::ended_early());
        };
        let mut message = json!({"role": "assistant", "content": self.content});
        if !self.thinking.is_empty() {
            message["thinking"] = json!(self.thinking);
        }
        if !self.calls.is_empty() {
            message["tool_calls"] = Value::Array(self.calls);
        }
        reply["message"] = message;
        Ok(reply)
    }
}

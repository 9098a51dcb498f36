//! OpenAI chat completions (`POST {base}/chat/completions`), also spoken by OpenRouter,
//! vLLM, llama.cpp, LM Studio and Ollama's compatibility endpoint.
//!
//! Tool calls are `message.tool_calls[{id, type:"function", function:{name, arguments}}]`
//! with `arguments` a JSON **string** (which may be invalid); results go back as one
//! `{"role":"tool","tool_call_id","content"}` message per call. A turn is a tool turn when
//! it carries tool calls, whatever `finish_reason` says (compatible servers send `stop`,
//! `""` or `tool_call`).

use serde_json::{Value, json};
use toolgate_core::declarations;

use super::stream::{self, Delta, DeltaSink};
use super::{
    ModelRequest, ModelTurn, ProviderError, ProviderKind, ToolChoice, Usage, WireFormat,
    decode_error,
};
use crate::message::{AssistantMessage, Message, ToolCall};

/// The OpenAi wire format.
pub struct OpenAi;

impl WireFormat for OpenAi {
    const KIND: ProviderKind = ProviderKind::Openai;

    fn path(_request: &ModelRequest<'_>) -> String {
        "/chat/completions".to_owned()
    }

    type Fold = Fold;

    fn stream_body(request: &ModelRequest<'_>) -> Value {
        let mut body = Self::request_body(request);
        body["stream"] = json!(true);
        // The usage comes in a last chunk with no choices.
        body["stream_options"] = json!({"include_usage": true});
        body
    }

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
                    let mut m = json!({
                        "role": "assistant",
                        "content": if a.text.is_empty() && !a.tool_calls.is_empty() { Value::Null } else { json!(a.text) },
                    });
                    if !a.tool_calls.is_empty() {
                        m["tool_calls"] = a
                            .tool_calls
                            .iter()
                            .map(|c| {
                                json!({
                                    "id": c.id,
                                    "type": "function",
                                    "function": {"name": request.wire_name(&c.name), "arguments": c.arguments_text()},
                                })
                            })
                            .collect();
                    }
                    messages.push(m);
                }
                Message::ToolResults { results } => {
                    for r in results {
                        messages.push(
                            json!({"role": "tool", "tool_call_id": r.call_id, "content": r.content}),
                        );
                    }
                }
            }
        }
        let mut body = json!({
            "model": request.model,
            "messages": messages,
            "stream": false,
        });
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| declarations::openai(t.declared()))
                .collect();
            body["tool_choice"] = json!(match request.tool_choice {
                ToolChoice::Auto => "auto",
                ToolChoice::None => "none",
            });
            body["parallel_tool_calls"] = json!(request.parallel_tool_calls);
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(max) = request.max_tokens {
            body["max_completion_tokens"] = json!(max);
        }
        if let Some(schema) = request.output_schema {
            body["response_format"] = json!({
                "type": "json_schema",
                "json_schema": {"name": "answer", "schema": schema},
            });
        }
        body
    }

    fn decode(request: &ModelRequest<'_>, raw: Value) -> Result<ModelTurn, ProviderError> {
        let choice = raw
            .pointer("/choices/0")
            .ok_or_else(|| decode_error("no choices in the reply"))?;
        let message = choice
            .get("message")
            .ok_or_else(|| decode_error("no message in the first choice"))?;
        let text = content_text(message.get("content"));
        let tool_calls = tool_calls(request, message)?;
        // `reasoning_content` (vLLM, DeepSeek) or `reasoning` (OpenRouter).
        let reasoning = ["reasoning_content", "reasoning"]
            .iter()
            .find_map(|k| message.get(*k).and_then(Value::as_str))
            .filter(|s| !s.is_empty())
            .map(str::to_owned);
        let stop_reason = super::text_field(choice, "finish_reason");
        let usage = raw.get("usage").and_then(|u| {
            let input = u.get("prompt_tokens")?.as_u64()?;
            Some(Usage {
                input_tokens: input,
                output_tokens: u
                    .get("completion_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                cached_input_tokens: u
                    .pointer("/prompt_tokens_details/cached_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                reasoning_tokens: u
                    .pointer("/completion_tokens_details/reasoning_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            })
        });
        Ok(ModelTurn {
            message: AssistantMessage {
                text,
                tool_calls,
                reasoning,
                native: None,
            },
            stop_reason,
            usage,
            raw,
        })
    }
}

/// `chat.completion.chunk`s folded into a `chat.completion`: `delta.content` and
/// `delta.reasoning_content` / `delta.reasoning` appended, `delta.tool_calls` put
/// together by `index` (id and name in the first piece, `arguments` in pieces).
#[derive(Default)]
pub struct Fold {
    head: serde_json::Map<String, Value>,
    text: String,
    reasoning: String,
    calls: Vec<Value>,
    finish_reason: Option<Value>,
    usage: Option<Value>,
}

impl stream::Fold for Fold {
    fn push(&mut self, chunk: Value, sink: DeltaSink<'_>) -> Result<(), ProviderError> {
        for key in ["id", "model", "created", "system_fingerprint"] {
            if let Some(v) = chunk.get(key).filter(|v| !v.is_null()) {
                self.head.entry(key).or_insert_with(|| v.clone());
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(usage.clone());
        }
        let Some(choice) = chunk.pointer("/choices/0") else {
            return Ok(());
        };
        let delta = choice.get("delta").unwrap_or(&Value::Null);
        if let Some(text) = delta.get("content").and_then(Value::as_str)
            && !text.is_empty()
        {
            self.text.push_str(text);
            sink(Delta::Text(text.to_owned()));
        }
        if let Some(text) = ["reasoning_content", "reasoning"]
            .iter()
            .find_map(|k| delta.get(*k).and_then(Value::as_str))
            .filter(|s| !s.is_empty())
        {
            self.reasoning.push_str(text);
            sink(Delta::Reasoning(text.to_owned()));
        }
        for (n, piece) in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            let index = piece
                .get("index")
                .and_then(Value::as_u64)
                .map_or(n, |i| i as usize);
            if index > 1024 {
                return Err(decode_error("a tool call index beyond 1024"));
            }
            while self.calls.len() <= index {
                self.calls.push(json!({"type": "function", "function": {}}));
            }
            let call = &mut self.calls[index];
            if let Some(id) = piece.get("id").and_then(Value::as_str) {
                call["id"] = json!(id);
            }
            let function = piece.get("function").unwrap_or(&Value::Null);
            if let Some(name) = function.get("name").and_then(Value::as_str) {
                stream::append(&mut call["function"], "name", name);
            }
            if let Some(args) = function.get("arguments").and_then(Value::as_str) {
                stream::append(&mut call["function"], "arguments", args);
            }
        }
        if let Some(reason) = choice.get("finish_reason").filter(|r| !r.is_null()) {
            self.finish_reason = Some(reason.clone());
        }
        Ok(())
    }

    fn finish(self) -> Result<Value, ProviderError> {
        let Some(finish_reason) = self.finish_reason else {
            return Err(stream::ended_early());
        };
        let mut message = json!({
            "role": "assistant",
            "content": if self.text.is_empty() && !self.calls.is_empty() { Value::Null } else { json!(self.text) },
        });
        if !self.reasoning.is_empty() {
            message["reasoning_content"] = json!(self.reasoning);
        }
        if !self.calls.is_empty() {
            message["tool_calls"] = Value::Array(self.calls);
        }
        let mut reply = Value::Object(self.head);
        reply["object"] = json!("chat.completion");
        reply["choices"] =
            json!([{"index": 0, "message": message, "finish_reason": finish_reason}]);
        if let Some(usage) = self.usage {
            reply["usage"] = usage;
        }
        Ok(reply)
    }
}

/// The `message.tool_calls` of an OpenAI-shaped reply (OpenAI, and Ollama's native API,
/// whose `arguments` is an object rather than a string): a call without an id is named
/// `call_{n}`.
pub(super) fn tool_calls(
    request: &ModelRequest<'_>,
    message: &Value,
) -> Result<Vec<ToolCall>, ProviderError> {
    let mut tool_calls = Vec::new();
    for (n, call) in message
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let function = call.get("function").unwrap_or(&Value::Null);
        let Some(name) = function.get("name").and_then(Value::as_str) else {
            return Err(decode_error("a tool call without a function name"));
        };
        let (id, provider_id) = match call.get("id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => (id.to_owned(), true),
            _ => (format!("call_{n}"), false),
        };
        let name = request.gateway_name(name);
        tool_calls.push(match function.get("arguments") {
            Some(Value::String(args)) => ToolCall::from_text(id, provider_id, name, args),
            Some(other) => ToolCall::from_value(id, provider_id, name, other.clone()),
            None => ToolCall::from_value(id, provider_id, name, Value::Null),
        });
    }
    Ok(tool_calls)
}

/// `content` as a string, or the text parts of a content array.
fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

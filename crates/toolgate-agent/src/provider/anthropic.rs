//! Anthropic Messages (`POST {base}/v1/messages`, `x-api-key`, `anthropic-version:
//! 2023-06-01`).
//!
//! Tool calls are `tool_use` content blocks with an `input` object. The assistant's content
//! is echoed back unchanged (thinking blocks keep their signatures), followed by **one**
//! user message that starts with a `tool_result` block for every call (`is_error: true` on
//! failures), then any gateway note as text. Tools stay declared even when the model must
//! answer in text (`tool_choice: none`): the API refuses tool blocks without tools.

use serde_json::{Value, json};
use toolgate_core::declarations;

use super::stream::{self, Delta, DeltaSink};
use super::{
    ModelRequest, ModelTurn, ProviderError, ProviderKind, ToolChoice, Usage, WireFormat,
    decode_error, push_to_user,
};
use crate::message::{AssistantMessage, Message, ToolCall};

/// `max_tokens` when the agent sets none (the API requires one).
const DEFAULT_MAX_TOKENS: u32 = 4096;
const FORMAT: &str = "anthropic";

/// The Anthropic wire format.
pub struct Anthropic;

impl WireFormat for Anthropic {
    const KIND: ProviderKind = ProviderKind::Anthropic;

    fn path(_request: &ModelRequest<'_>) -> String {
        "/v1/messages".to_owned()
    }

    type Fold = Fold;

    fn request_body(request: &ModelRequest<'_>) -> Value {
        let mut messages: Vec<Value> = Vec::with_capacity(request.messages.len());
        for message in request.messages {
            match message {
                Message::User { text } => push_to_user(
                    &mut messages,
                    "content",
                    json!({"type": "text", "text": text}),
                ),
                Message::Note { text } => push_to_user(
                    &mut messages,
                    "content",
                    json!({"type": "text", "text": text}),
                ),
                Message::Assistant(a) => {
                    let content = match &a.native {
                        Some(native) if native.format == FORMAT => native.value.clone(),
                        _ => {
                            let mut blocks = Vec::new();
                            if !a.text.is_empty() {
                                blocks.push(json!({"type": "text", "text": a.text}));
                            }
                            for c in &a.tool_calls {
                                let input = if c.arguments.is_object() {
                                    c.arguments.clone()
                                } else {
                                    json!({})
                                };
                                blocks.push(json!({"type": "tool_use", "id": c.id, "name": request.wire_name(&c.name), "input": input}));
                            }
                            Value::Array(blocks)
                        }
                    };
                    messages.push(json!({"role": "assistant", "content": content}));
                }
                Message::ToolResults { results } => {
                    let blocks: Vec<Value> = results
                        .iter()
                        .map(|r| {
                            let mut block = json!({"type": "tool_result", "tool_use_id": r.call_id, "content": r.content});
                            if r.is_error {
                                block["is_error"] = json!(true);
                            }
                            block
                        })
                        .collect();
                    messages.push(json!({"role": "user", "content": blocks}));
                }
            }
        }
        let mut body = json!({
            "model": request.model,
            "max_tokens": request.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS),
            "messages": messages,
        });
        if let Some(system) = request.system {
            body["system"] = json!(system);
        }
        if !request.tools.is_empty() {
            body["tools"] = request
                .tools
                .iter()
                .map(|t| declarations::anthropic(t.declared()))
                .collect();
            body["tool_choice"] = match request.tool_choice {
                ToolChoice::Auto => {
                    json!({"type": "auto", "disable_parallel_tool_use": !request.parallel_tool_calls})
                }
                ToolChoice::None => json!({"type": "none"}),
            };
        }
        if let Some(t) = request.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(schema) = request.output_schema {
            body["output_config"] = json!({"format": {"type": "json_schema", "schema": schema}});
        }
        body
    }

    fn decode(request: &ModelRequest<'_>, raw: Value) -> Result<ModelTurn, ProviderError> {
        let content = raw
            .get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| decode_error("no content array"))?;
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut tool_calls = Vec::new();
        for block in content {
            match block.get("type").and_then(Value::as_str) {
                Some("text") => {
                    text.push_str(block.get("text").and_then(Value::as_str).unwrap_or(""))
                }
                Some("thinking") => {
                    reasoning.push_str(block.get("thinking").and_then(Value::as_str).unwrap_or(""))
                }
                Some("tool_use") => {
                    let (Some(id), Some(name)) = (
                        block.get("id").and_then(Value::as_str),
                        block.get("name").and_then(Value::as_str),
                    ) else {
                        return Err(decode_error("a tool_use block without id or name"));
                    };
                    let input = block.get("input").cloned().unwrap_or(Value::Null);
                    tool_calls.push(ToolCall::from_value(
                        id.to_owned(),
                        true,
                        request.gateway_name(name),
                        input,
                    ));
                }
                // redacted_thinking, server tool blocks…: kept in `native`, echoed back.
                _ => {}
            }
        }
        let usage = raw.get("usage").and_then(|u| {
            let input = u.get("input_tokens")?.as_u64()?;
            let cache_read = u
                .get("cache_read_input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let cache_write = u
                .get("cache_creation_input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            Some(Usage {
                // Anthropic's input_tokens leaves out cached and cache-writing tokens.
                input_tokens: input + cache_read + cache_write,
                output_tokens: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
                cached_input_tokens: cache_read,
                reasoning_tokens: 0,
            })
        });
        Ok(ModelTurn {
            message: AssistantMessage::with_blocks(
                FORMAT,
                content.clone(),
                text,
                tool_calls,
                reasoning,
            ),
            stop_reason: super::text_field(&raw, "stop_reason"),
            usage,
            raw,
        })
    }
}

/// Messages stream events folded into a message: `message_start` gives the message
/// (id, model, input usage), `content_block_start` each block, `content_block_delta`
/// its `text_delta`, `thinking_delta`, `signature_delta` or `input_json_delta` (the
/// tool input as JSON text in pieces, parsed at `content_block_stop`), `message_delta`
/// the stop reason and output usage; `message_stop` ends it.
#[derive(Default)]
pub struct Fold {
    message: Option<Value>,
    blocks: Vec<Value>,
    /// Each tool_use block's input so far, by block index.
    inputs: std::collections::HashMap<usize, String>,
    stopped: bool,
}

impl Fold {
    fn block(&mut self, event: &Value) -> Result<&mut Value, ProviderError> {
        let index = event
            .get("index")
            .and_then(Value::as_u64)
            .ok_or_else(|| decode_error("a content block event without an index"))?
            as usize;
        self.blocks
            .get_mut(index)
            .ok_or_else(|| decode_error("a delta for a content block that never started"))
    }
}

impl stream::Fold for Fold {
    fn push(&mut self, event: Value, sink: DeltaSink<'_>) -> Result<(), ProviderError> {
        match event.get("type").and_then(Value::as_str) {
            Some("message_start") => {
                self.message = Some(event.get("message").cloned().unwrap_or_else(|| json!({})));
            }
            Some("content_block_start") => {
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if index > 1024 {
                    return Err(decode_error("a content block index beyond 1024"));
                }
                while self.blocks.len() <= index {
                    self.blocks.push(Value::Null);
                }
                self.blocks[index] = event.get("content_block").cloned().unwrap_or(Value::Null);
            }
            Some("content_block_delta") => {
                let delta = event.get("delta").cloned().unwrap_or(Value::Null);
                let text = |key: &str| delta.get(key).and_then(Value::as_str).unwrap_or("");
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        stream::append(self.block(&event)?, "text", text("text"));
                        sink(Delta::Text(text("text").to_owned()));
                    }
                    Some("thinking_delta") => {
                        stream::append(self.block(&event)?, "thinking", text("thinking"));
                        sink(Delta::Reasoning(text("thinking").to_owned()));
                    }
                    Some("signature_delta") => {
                        stream::append(self.block(&event)?, "signature", text("signature"));
                    }
                    Some("input_json_delta") => {
                        self.block(&event)?;
                        let index = event.get("index").and_then(Value::as_u64).unwrap_or(0);
                        self.inputs
                            .entry(index as usize)
                            .or_default()
                            .push_str(text("partial_json"));
                    }
                    _ => {}
                }
            }
            Some("content_block_stop") => {
                let index = event.get("index").and_then(Value::as_u64).unwrap_or(0) as usize;
                if let Some(json) = self.inputs.remove(&index) {
                    // Empty input is `{}`; input that does not parse goes on as text, and
                    // the loop answers it as malformed arguments.
                    let input = if json.trim().is_empty() {
                        json!({})
                    } else {
                        serde_json::from_str(&json).unwrap_or(Value::String(json))
                    };
                    self.block(&event)?["input"] = input;
                }
            }
            Some("message_delta") => {
                let message = self.message.get_or_insert_with(|| json!({}));
                if let Some(delta) = event.get("delta").and_then(Value::as_object) {
                    for (key, value) in delta {
                        message[key.as_str()] = value.clone();
                    }
                }
                if let Some(usage) = event.get("usage").and_then(Value::as_object) {
                    if !message["usage"].is_object() {
                        message["usage"] = json!({});
                    }
                    for (key, value) in usage {
                        message["usage"][key.as_str()] = value.clone();
                    }
                }
            }
            Some("message_stop") => self.stopped = true,
            // `ping`, and event types added later.
            _ => {}
        }
        Ok(())
    }

    fn finish(self) -> Result<Value, ProviderError> {
        let (Some(mut message), true) = (self.message, self.stopped) else {
            return Err(stream::ended_early());
        };
        message["content"] =
            Value::Array(self.blocks.into_iter().filter(|b| !b.is_null()).collect());
        Ok(message)
    }
}

//! Google Gemini `generateContent` (`POST {base}/v1beta/models/{model}:generateContent`,
//! `x-goog-api-key`).
//!
//! Calls are `functionCall` parts (`args` an object, `id` often absent); the model's parts
//! are echoed back unchanged (thought signatures are mandatory for Gemini 3), then one user
//! turn holding a `functionResponse` part per call, whose `response` must be an object:
//! `{"result": …}` or `{"error": …}`. Parameters are reduced to the OpenAPI subset Gemini
//! accepts. There is no parallel switch: the loop answers extra calls "not executed".

use serde_json::{Value, json};
use toolgate_core::declarations;

use super::stream::{self, Delta, DeltaSink};
use super::{
    ModelRequest, ModelTurn, ProviderError, ProviderKind, ToolChoice, Usage, WireFormat,
    decode_error, push_to_user,
};
use crate::message::{AssistantMessage, Message, ToolCall};

const FORMAT: &str = "gemini";

/// The Gemini wire format.
pub struct Gemini;

impl WireFormat for Gemini {
    const KIND: ProviderKind = ProviderKind::Gemini;

    fn path(request: &ModelRequest<'_>) -> String {
        format!("/v1beta/models/{}:generateContent", request.model)
    }

    type Fold = Fold;

    fn stream_path(request: &ModelRequest<'_>) -> String {
        format!(
            "/v1beta/models/{}:streamGenerateContent?alt=sse",
            request.model
        )
    }

    fn stream_body(request: &ModelRequest<'_>) -> Value {
        Self::request_body(request)
    }

    fn request_body(request: &ModelRequest<'_>) -> Value {
        let mut contents: Vec<Value> = Vec::with_capacity(request.messages.len());
        for message in request.messages {
            match message {
                Message::User { text } | Message::Note { text } => {
                    push_to_user(&mut contents, "parts", json!({"text": text}));
                }
                Message::Assistant(a) => {
                    let parts = match &a.native {
                        Some(native) if native.format == FORMAT => native.value.clone(),
                        _ => {
                            let mut parts = Vec::new();
                            if !a.text.is_empty() {
                                parts.push(json!({"text": a.text}));
                            }
                            for c in &a.tool_calls {
                                let args = if c.arguments.is_object() {
                                    c.arguments.clone()
                                } else {
                                    json!({})
                                };
                                let mut call =
                                    json!({"name": request.wire_name(&c.name), "args": args});
                                if c.provider_id {
                                    call["id"] = json!(c.id);
                                }
                                parts.push(json!({"functionCall": call}));
                            }
                            Value::Array(parts)
                        }
                    };
                    contents.push(json!({"role": "model", "parts": parts}));
                }
                Message::ToolResults { results } => {
                    for r in results {
                        let value = serde_json::from_str::<Value>(&r.content)
                            .unwrap_or_else(|_| Value::String(r.content.clone()));
                        let key = if r.is_error { "error" } else { "result" };
                        let mut response =
                            json!({"name": request.wire_name(&r.name), "response": {key: value}});
                        if r.provider_id {
                            response["id"] = json!(r.call_id);
                        }
                        push_to_user(
                            &mut contents,
                            "parts",
                            json!({"functionResponse": response}),
                        );
                    }
                }
            }
        }
        let mut body = json!({"contents": contents});
        if let Some(system) = request.system {
            body["systemInstruction"] = json!({"parts": [{"text": system}]});
        }
        if !request.tools.is_empty() {
            let decls: Vec<Value> = request
                .tools
                .iter()
                .map(|t| declarations::gemini(t.declared()))
                .collect();
            body["tools"] = json!([{"functionDeclarations": decls}]);
            let mode = match request.tool_choice {
                ToolChoice::Auto => "AUTO",
                ToolChoice::None => "NONE",
            };
            body["toolConfig"] = json!({"functionCallingConfig": {"mode": mode}});
        }
        let mut generation = serde_json::Map::new();
        if let Some(t) = request.temperature {
            generation.insert("temperature".into(), json!(t));
        }
        if let Some(max) = request.max_tokens {
            generation.insert("maxOutputTokens".into(), json!(max));
        }
        // JSON mode with function declarations is refused by models before Gemini 3: the
        // schema goes only on calls without tools (the loop validates every answer anyway).
        if let Some(schema) = request.output_schema
            && request.tools.is_empty()
        {
            generation.insert("responseMimeType".into(), json!("application/json"));
            generation.insert("responseJsonSchema".into(), schema.clone());
        }
        if !generation.is_empty() {
            body["generationConfig"] = Value::Object(generation);
        }
        body
    }

    fn decode(request: &ModelRequest<'_>, raw: Value) -> Result<ModelTurn, ProviderError> {
        let candidate = raw.pointer("/candidates/0").ok_or_else(|| {
            // A prompt blocked by safety filters comes back without candidates.
            let reason = raw
                .pointer("/promptFeedback/blockReason")
                .and_then(Value::as_str)
                .unwrap_or("no candidates in the reply");
            decode_error(reason)
        })?;
        let parts = candidate
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut text = String::new();
        let mut reasoning = String::new();
        let mut tool_calls = Vec::new();
        for (n, part) in parts.iter().enumerate() {
            if let Some(call) = part.get("functionCall") {
                let Some(name) = call.get("name").and_then(Value::as_str) else {
                    return Err(decode_error("a functionCall without a name"));
                };
                let (id, provider_id) = match call.get("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => (id.to_owned(), true),
                    _ => (format!("call_{n}"), false),
                };
                let args = call.get("args").cloned().unwrap_or(Value::Null);
                tool_calls.push(ToolCall::from_value(
                    id,
                    provider_id,
                    request.gateway_name(name),
                    args,
                ));
            } else if let Some(t) = part.get("text").and_then(Value::as_str) {
                if part.get("thought").and_then(Value::as_bool) == Some(true) {
                    reasoning.push_str(t);
                } else {
                    text.push_str(t);
                }
            }
        }
        let usage = raw.get("usageMetadata").and_then(|u| {
            let input = u.get("promptTokenCount")?.as_u64()?;
            let thoughts = u
                .get("thoughtsTokenCount")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            Some(Usage {
                input_tokens: input,
                // Gemini counts thinking apart from the candidates' tokens.
                output_tokens: u
                    .get("candidatesTokenCount")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    + thoughts,
                cached_input_tokens: u
                    .get("cachedContentTokenCount")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                reasoning_tokens: thoughts,
            })
        });
        Ok(ModelTurn {
            message: AssistantMessage::with_blocks(FORMAT, parts, text, tool_calls, reasoning),
            stop_reason: super::text_field(candidate, "finishReason"),
            usage,
            raw,
        })
    }
}

/// `streamGenerateContent` chunks (each a `GenerateContentResponse`) folded into one:
/// text parts appended to the text part before them when both are answer or both are
/// thought (a thought signature kept on the part), other parts (function calls) kept
/// whole; the last `finishReason` and `usageMetadata` win. A stream has no end marker.
#[derive(Default)]
pub struct Fold {
    parts: Vec<Value>,
    finish_reason: Option<Value>,
    rest: serde_json::Map<String, Value>,
}

impl stream::Fold for Fold {
    fn push(&mut self, chunk: Value, sink: DeltaSink<'_>) -> Result<(), ProviderError> {
        for key in [
            "usageMetadata",
            "modelVersion",
            "responseId",
            "promptFeedback",
        ] {
            if let Some(v) = chunk.get(key) {
                self.rest.insert(key.to_owned(), v.clone());
            }
        }
        let Some(candidate) = chunk.pointer("/candidates/0") else {
            return Ok(());
        };
        if let Some(reason) = candidate.get("finishReason") {
            self.finish_reason = Some(reason.clone());
        }
        for part in candidate
            .pointer("/content/parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(text) = part.get("text").and_then(Value::as_str) else {
                self.parts.push(part.clone());
                continue;
            };
            let thought = part.get("thought").and_then(Value::as_bool) == Some(true);
            sink(if thought {
                Delta::Reasoning(text.to_owned())
            } else {
                Delta::Text(text.to_owned())
            });
            let joins = self.parts.last().is_some_and(|last| {
                last.get("text").is_some()
                    && (last.get("thought").and_then(Value::as_bool) == Some(true)) == thought
            });
            if joins && let Some(last) = self.parts.last_mut() {
                stream::append(last, "text", text);
                if let Some(signature) = part.get("thoughtSignature") {
                    last["thoughtSignature"] = signature.clone();
                }
            } else {
                self.parts.push(part.clone());
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<Value, ProviderError> {
        let mut candidate = json!({"content": {"role": "model", "parts": self.parts}, "index": 0});
        if let Some(reason) = self.finish_reason {
            candidate["finishReason"] = reason;
        }
        let mut reply = Value::Object(self.rest);
        reply["candidates"] = json!([candidate]);
        Ok(reply)
    }
}

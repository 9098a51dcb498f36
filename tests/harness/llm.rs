//! Scripted LLM provider servers on loopback, speaking each provider's documented wire
//! format (see `shared/AGENT-NOTES.md` §3). Each answers its requests from a script, in
//! order (the last reply repeats), records every request, and refuses histories the real
//! provider refuses: an OpenAI or Anthropic tool call without its result, Anthropic tool
//! blocks without `tools`, Anthropic tool results not at the start of the user message.
//! A streamed request (`stream: true`; Gemini's `streamGenerateContent?alt=sse`) gets its
//! reply as that provider streams it, in pieces.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One scripted answer.
#[derive(Clone, Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Value,
    /// Wait this long before answering.
    pub delay: Duration,
    /// Streamed, break off after this many messages with the provider's mid-stream error
    /// (Anthropic `overloaded_error`, others their error object).
    pub break_after: Option<usize>,
}

impl Reply {
    pub fn ok(body: Value) -> Reply {
        Reply {
            status: 200,
            headers: Vec::new(),
            body,
            delay: Duration::ZERO,
            break_after: None,
        }
    }

    /// Streamed, the reply breaks off with an error after `messages` messages.
    pub fn broken_after(mut self, messages: usize) -> Reply {
        self.break_after = Some(messages);
        self
    }

    pub fn status(status: u16, body: Value) -> Reply {
        Reply {
            status,
            ..Reply::ok(body)
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn delayed(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }
}

/// One request the server received.
#[derive(Clone, Debug)]
pub struct Recorded {
    pub path: String,
    pub headers: HeaderMap,
    pub body: Value,
    pub at: std::time::Instant,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Openai,
    Anthropic,
    Gemini,
    Ollama,
}

struct Shared {
    wire: Wire,
    script: Vec<Reply>,
    requests: Mutex<Vec<Recorded>>,
}

pub struct MockLlm {
    /// The base URL to configure (`…/v1` for OpenAI, the root for the others).
    pub base: String,
    shared: Arc<Shared>,
}

impl MockLlm {
    pub async fn start(wire: Wire, script: Vec<Reply>) -> MockLlm {
        assert!(!script.is_empty(), "a script needs at least one reply");
        let shared = Arc::new(Shared {
            wire,
            script,
            requests: Mutex::default(),
        });
        let app = Router::new()
            .fallback(axum::routing::post(answer))
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        let root = format!("http://{addr}");
        let base = match wire {
            Wire::Openai => format!("{root}/v1"),
            _ => root,
        };
        MockLlm { base, shared }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

async fn answer(
    State(shared): State<Arc<Shared>>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    let body: Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => return error(shared.wire, 400, &format!("body is not JSON: {e}")),
    };
    let index = {
        let mut requests = shared.requests.lock().unwrap_or_else(|p| p.into_inner());
        requests.push(Recorded {
            path: uri.path().to_owned(),
            headers,
            body: body.clone(),
            at: std::time::Instant::now(),
        });
        requests.len() - 1
    };
    let expected_path = match shared.wire {
        Wire::Openai => "/v1/chat/completions".to_owned(),
        Wire::Anthropic => "/v1/messages".to_owned(),
        Wire::Gemini if uri.path().ends_with(":streamGenerateContent") => {
            format!("/v1beta/models/{}:streamGenerateContent", "gemini-test")
        }
        Wire::Gemini => format!("/v1beta/models/{}:generateContent", "gemini-test"),
        Wire::Ollama => "/api/chat".to_owned(),
    };
    if uri.path() != expected_path {
        return error(shared.wire, 404, &format!("no route {}", uri.path()));
    }
    if let Err(problem) = check(shared.wire, &body) {
        return error(shared.wire, 400, &problem);
    }
    let reply = shared.script[index.min(shared.script.len() - 1)].clone();
    tokio::time::sleep(reply.delay).await;
    let streamed = match shared.wire {
        Wire::Gemini => uri.path().ends_with(":streamGenerateContent"),
        _ => body["stream"] == json!(true),
    };
    if streamed && reply.status == 200 {
        if shared.wire == Wire::Gemini && uri.query() != Some("alt=sse") {
            return error(shared.wire, 400, "this fake streams only with alt=sse");
        }
        return streams::respond(shared.wire, &body, &reply);
    }
    let mut response = (
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
        axum::Json(reply.body),
    )
        .into_response();
    for (k, v) in reply.headers {
        if let (Ok(k), Ok(v)) = (
            axum::http::HeaderName::try_from(k),
            axum::http::HeaderValue::try_from(v),
        ) {
            response.headers_mut().insert(k, v);
        }
    }
    response
}

/// The provider's error body for `status`.
pub fn error_body(wire: Wire, status: u16, message: &str) -> Value {
    match wire {
        Wire::Openai => {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}})
        }
        Wire::Anthropic => {
            let kind = match status {
                429 => "rate_limit_error",
                529 => "overloaded_error",
                500 => "api_error",
                _ => "invalid_request_error",
            };
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
        Wire::Gemini => {
            json!({"error": {"code": status, "message": message, "status": if status == 429 { "RESOURCE_EXHAUSTED" } else { "INVALID_ARGUMENT" }}})
        }
        Wire::Ollama => json!({"error": message}),
    }
}

fn error(wire: Wire, status: u16, message: &str) -> Response {
    (
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        axum::Json(error_body(wire, status, message)),
    )
        .into_response()
}

/// What the real provider would refuse.
fn check(wire: Wire, body: &Value) -> Result<(), String> {
    match wire {
        Wire::Openai => {
            if let Some(format) = body.get("response_format") {
                match format["type"].as_str() {
                    Some("text" | "json_object") => {}
                    Some("json_schema") => {
                        let name = format["json_schema"]["name"].as_str().unwrap_or_default();
                        if name.is_empty()
                            || name.len() > 64
                            || !name
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                        {
                            return Err("response_format.json_schema.name: must match ^[a-zA-Z0-9_-]{1,64}$".into());
                        }
                        if format["json_schema"]["schema"]["type"] != "object" {
                            return Err(
                                "response_format.json_schema.schema: the root must be an object"
                                    .into(),
                            );
                        }
                    }
                    _ => {
                        return Err(
                            "response_format.type: must be text, json_object or json_schema".into(),
                        );
                    }
                }
            }
            let messages = body["messages"].as_array().ok_or("messages missing")?;
            for (i, m) in messages.iter().enumerate() {
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    let id = call["id"].as_str().ok_or("tool call without id")?;
                    let args = call["function"]["arguments"].as_str();
                    if args.is_none() {
                        return Err("function.arguments must be a string".into());
                    }
                    let answered = messages[i + 1..]
                        .iter()
                        .take_while(|m| m["role"] == "tool")
                        .any(|m| m["tool_call_id"] == id);
                    if !answered {
                        return Err(format!(
                            "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. Missing: {id}"
                        ));
                    }
                }
            }
            Ok(())
        }
        Wire::Anthropic => {
            if body["max_tokens"].as_u64().is_none() {
                return Err("max_tokens: Field required".into());
            }
            if let Some(format) = body.pointer("/output_config/format")
                && (format["type"] != "json_schema" || !format["schema"].is_object())
            {
                return Err("output_config.format: type json_schema with a schema object".into());
            }
            let messages = body["messages"].as_array().ok_or("messages missing")?;
            let mut any_tool_blocks = false;
            for (i, m) in messages.iter().enumerate() {
                let blocks = m["content"].as_array().cloned().unwrap_or_default();
                let uses: Vec<&str> = blocks
                    .iter()
                    .filter(|b| b["type"] == "tool_use")
                    .filter_map(|b| b["id"].as_str())
                    .collect();
                any_tool_blocks |= blocks
                    .iter()
                    .any(|b| b["type"] == "tool_use" || b["type"] == "tool_result");
                if uses.is_empty() {
                    continue;
                }
                let next = messages.get(i + 1).ok_or_else(|| format!("messages.{i}: tool_use ids were found without tool_result blocks immediately after"))?;
                let next_blocks = next["content"].as_array().cloned().unwrap_or_default();
                let leading: Vec<&str> = next_blocks
                    .iter()
                    .take_while(|b| b["type"] == "tool_result")
                    .filter_map(|b| b["tool_use_id"].as_str())
                    .collect();
                for id in uses {
                    if !leading.contains(&id) {
                        return Err(format!(
                            "messages.{i}: tool_use ids were found without tool_result blocks immediately after: {id}"
                        ));
                    }
                }
            }
            if any_tool_blocks && body["tools"].as_array().is_none_or(|t| t.is_empty()) {
                return Err(
                    "Requests which include `tool_use` or `tool_result` blocks must define tools."
                        .into(),
                );
            }
            Ok(())
        }
        Wire::Gemini => {
            let generation = &body["generationConfig"];
            if generation.get("responseJsonSchema").is_some()
                && generation["responseMimeType"] != "application/json"
            {
                return Err("responseJsonSchema needs responseMimeType application/json".into());
            }
            // As models before Gemini 3 answer.
            if generation["responseMimeType"] == "application/json" && body.get("tools").is_some() {
                return Err(
                    "Function calling with a response mime type: 'application/json' is unsupported"
                        .into(),
                );
            }
            let contents = body["contents"].as_array().ok_or("contents missing")?;
            for c in contents {
                for p in c["parts"].as_array().into_iter().flatten() {
                    if let Some(r) = p.get("functionResponse")
                        && !r["response"].is_object()
                    {
                        return Err("functionResponse.response must be an object".into());
                    }
                }
            }
            Ok(())
        }
        Wire::Ollama => {
            if !body["stream"].is_boolean() {
                return Err(
                    "the gateway must say stream: false or true (Ollama streams by default)".into(),
                );
            }
            if let Some(format) = body.get("format")
                && format != "json"
                && !format.is_object()
            {
                return Err("format: \"json\" or a JSON schema".into());
            }
            Ok(())
        }
    }
}

/// Replies in each wire format.
pub mod says {
    use serde_json::{Value, json};

    pub fn openai_text(text: &str) -> Value {
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1760000000, "model": "gpt-test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        })
    }

    /// Tool calls `(id, name, arguments as JSON text)`.
    pub fn openai_calls(calls: &[(&str, &str, &str)]) -> Value {
        let calls: Vec<Value> = calls
            .iter()
            .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}}))
            .collect();
        json!({
            "id": "chatcmpl-2", "object": "chat.completion", "created": 1760000000, "model": "gpt-test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28,
                      "prompt_tokens_details": {"cached_tokens": 4}, "completion_tokens_details": {"reasoning_tokens": 2}}
        })
    }

    /// A plain text answer in `wire`'s format.
    pub fn text(wire: super::Wire, text: &str) -> Value {
        match wire {
            super::Wire::Openai => openai_text(text),
            super::Wire::Anthropic => anthropic_text(text),
            super::Wire::Gemini => gemini_text(text),
            super::Wire::Ollama => ollama_text(text),
        }
    }

    pub fn anthropic_text(text: &str) -> Value {
        json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 30, "output_tokens": 6, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        })
    }

    /// Text, then tool uses `(id, name, input)`.
    pub fn anthropic_calls(text: &str, calls: &[(&str, &str, Value)]) -> Value {
        let mut content = vec![
            json!({"type": "thinking", "thinking": "I should look.", "signature": "sig-abc"}),
            json!({"type": "text", "text": text}),
        ];
        for (id, name, input) in calls {
            content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
        }
        json!({
            "id": "msg_02", "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": "tool_use", "stop_sequence": null,
            "usage": {"input_tokens": 40, "output_tokens": 20, "cache_creation_input_tokens": 5, "cache_read_input_tokens": 10}
        })
    }

    pub fn gemini_text(text: &str) -> Value {
        json!({
            "candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 7, "totalTokenCount": 57},
            "modelVersion": "gemini-test", "responseId": "r1"
        })
    }

    pub fn gemini_calls(calls: &[(&str, Value)]) -> Value {
        let parts: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| {
                let mut p = json!({"functionCall": {"name": name, "args": args}});
                if i == 0 {
                    p["thoughtSignature"] = json!("CiQB-signature");
                }
                p
            })
            .collect();
        json!({
            "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 20, "thoughtsTokenCount": 12, "totalTokenCount": 82},
            "modelVersion": "gemini-test", "responseId": "r2"
        })
    }

    pub fn ollama_text(text: &str) -> Value {
        json!({
            "model": "qwen-test", "created_at": "2026-08-01T10:00:00Z",
            "message": {"role": "assistant", "content": text},
            "done": true, "done_reason": "stop", "prompt_eval_count": 21, "eval_count": 9
        })
    }

    pub fn ollama_calls(calls: &[(&str, Value)]) -> Value {
        let calls: Vec<Value> = calls
            .iter()
            .enumerate()
            .map(|(i, (name, args))| json!({"function": {"index": i, "name": name, "arguments": args}}))
            .collect();
        json!({
            "model": "qwen-test", "created_at": "2026-08-01T10:00:00Z",
            "message": {"role": "assistant", "content": "", "tool_calls": calls},
            "done": true, "done_reason": "stop", "prompt_eval_count": 21, "eval_count": 40
        })
    }
}

/// Replies streamed as each provider streams them, made from the unstreamed reply: text
/// in small pieces, tool arguments in pieces, usage where the provider puts it, a short
/// pause between messages so that a watcher sees them arrive one by one.
mod streams {
    use std::time::Duration;

    use axum::body::Body;
    use axum::response::{IntoResponse, Response};
    use serde_json::{Value, json};

    use super::{Reply, Wire};

    const PAUSE: Duration = Duration::from_millis(15);

    fn pieces(text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(4).map(|c| c.iter().collect()).collect()
    }

    pub fn respond(wire: Wire, request: &Value, reply: &Reply) -> Response {
        let mut messages: Vec<String> = match wire {
            Wire::Openai => openai(request, &reply.body),
            Wire::Anthropic => anthropic(&reply.body),
            Wire::Gemini => gemini(&reply.body),
            Wire::Ollama => ollama(&reply.body),
        };
        if let Some(after) = reply.break_after {
            messages.truncate(after);
            messages.push(match wire {
                Wire::Anthropic => sse(
                    Some("error"),
                    &json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
                ),
                Wire::Openai => sse(None, &json!({"error": {"message": "The server had an error", "type": "server_error"}})),
                Wire::Gemini => sse(None, &json!({"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}})),
                Wire::Ollama => format!("{}\n", json!({"error": "model runner crashed"})),
            });
        }
        let content_type = match wire {
            Wire::Ollama => "application/x-ndjson",
            _ => "text/event-stream",
        };
        let body = futures::stream::iter(messages).then(|m| async move {
            tokio::time::sleep(PAUSE).await;
            Ok::<_, std::convert::Infallible>(m)
        });
        use futures::StreamExt;
        ([("content-type", content_type)], Body::from_stream(body)).into_response()
    }

    fn sse(event: Option<&str>, data: &Value) -> String {
        match event {
            Some(event) => format!("event: {event}\ndata: {data}\n\n"),
            None => format!("data: {data}\n\n"),
        }
    }

    fn openai(request: &Value, reply: &Value) -> Vec<String> {
        let head = |delta: Value, finish: Value| {
            sse(
                None,
                &json!({
                    "id": reply["id"], "object": "chat.completion.chunk", "created": reply["created"],
                    "model": reply["model"], "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]
                }),
            )
        };
        let choice = &reply["choices"][0];
        let message = &choice["message"];
        let mut out = vec![head(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
        )];
        for piece in pieces(message["reasoning_content"].as_str().unwrap_or("")) {
            out.push(head(json!({"reasoning_content": piece}), Value::Null));
        }
        for piece in pieces(message["content"].as_str().unwrap_or("")) {
            out.push(head(json!({"content": piece}), Value::Null));
        }
        for (i, call) in message["tool_calls"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            out.push(head(
                json!({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""}}]}),
                Value::Null,
            ));
            for piece in pieces(call["function"]["arguments"].as_str().unwrap_or("")) {
                out.push(head(
                    json!({"tool_calls": [{"index": i, "function": {"arguments": piece}}]}),
                    Value::Null,
                ));
            }
        }
        out.push(head(json!({}), choice["finish_reason"].clone()));
        if request.pointer("/stream_options/include_usage") == Some(&json!(true)) {
            out.push(sse(
                None,
                &json!({"id": reply["id"], "object": "chat.completion.chunk",
                "model": reply["model"], "choices": [], "usage": reply["usage"]}),
            ));
        }
        out.push("data: [DONE]\n\n".into());
        out
    }

    fn anthropic(reply: &Value) -> Vec<String> {
        let mut start = reply.clone();
        start["content"] = json!([]);
        start["stop_reason"] = Value::Null;
        start["usage"]["output_tokens"] = json!(1);
        let mut out = vec![sse(
            Some("message_start"),
            &json!({"type": "message_start", "message": start}),
        )];
        for (i, block) in reply["content"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let (empty, deltas): (Value, Vec<Value>) = match block["type"].as_str() {
                Some("text") => (
                    json!({"type": "text", "text": ""}),
                    pieces(block["text"].as_str().unwrap_or(""))
                        .into_iter()
                        .map(|p| json!({"type": "text_delta", "text": p}))
                        .collect(),
                ),
                Some("thinking") => {
                    let mut d: Vec<Value> = pieces(block["thinking"].as_str().unwrap_or(""))
                        .into_iter()
                        .map(|p| json!({"type": "thinking_delta", "thinking": p}))
                        .collect();
                    d.push(json!({"type": "signature_delta", "signature": block["signature"]}));
                    (
                        json!({"type": "thinking", "thinking": "", "signature": ""}),
                        d,
                    )
                }
                Some("tool_use") => (
                    json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                    pieces(&block["input"].to_string())
                        .into_iter()
                        .map(|p| json!({"type": "input_json_delta", "partial_json": p}))
                        .collect(),
                ),
                _ => (block.clone(), Vec::new()),
            };
            out.push(sse(
                Some("content_block_start"),
                &json!({"type": "content_block_start", "index": i, "content_block": empty}),
            ));
            if i == 0 {
                out.push(sse(Some("ping"), &json!({"type": "ping"})));
            }
            for delta in deltas {
                out.push(sse(
                    Some("content_block_delta"),
                    &json!({"type": "content_block_delta", "index": i, "delta": delta}),
                ));
            }
            out.push(sse(
                Some("content_block_stop"),
                &json!({"type": "content_block_stop", "index": i}),
            ));
        }
        out.push(sse(
            Some("message_delta"),
            &json!({"type": "message_delta",
            "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": null},
            "usage": {"output_tokens": reply["usage"]["output_tokens"]}}),
        ));
        out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
        out
    }

    fn gemini(reply: &Value) -> Vec<String> {
        let candidate = &reply["candidates"][0];
        let chunk = |parts: Vec<Value>| {
            json!({"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
                   "modelVersion": reply["modelVersion"], "responseId": reply["responseId"]})
        };
        let mut chunks = Vec::new();
        for part in candidate["content"]["parts"]
            .as_array()
            .into_iter()
            .flatten()
        {
            match part["text"].as_str() {
                Some(text) => {
                    for (n, piece) in pieces(text).into_iter().enumerate() {
                        let mut p = part.clone();
                        p["text"] = json!(piece);
                        if n > 0
                            && let Some(map) = p.as_object_mut()
                        {
                            map.remove("thoughtSignature");
                        }
                        chunks.push(chunk(vec![p]));
                    }
                }
                None => chunks.push(chunk(vec![part.clone()])),
            }
        }
        let mut last = chunks.pop().unwrap_or_else(|| chunk(Vec::new()));
        last["candidates"][0]["finishReason"] = candidate["finishReason"].clone();
        last["usageMetadata"] = reply["usageMetadata"].clone();
        chunks.push(last);
        chunks.iter().map(|c| sse(None, c)).collect()
    }

    fn ollama(reply: &Value) -> Vec<String> {
        let line = |v: Value| format!("{v}\n");
        let head = |message: Value| {
            line(
                json!({"model": reply["model"], "created_at": reply["created_at"], "message": message, "done": false}),
            )
        };
        let message = &reply["message"];
        let mut out = Vec::new();
        for piece in pieces(message["thinking"].as_str().unwrap_or("")) {
            out.push(head(
                json!({"role": "assistant", "content": "", "thinking": piece}),
            ));
        }
        for piece in pieces(message["content"].as_str().unwrap_or("")) {
            out.push(head(json!({"role": "assistant", "content": piece})));
        }
        if let Some(calls) = message.get("tool_calls") {
            out.push(head(
                json!({"role": "assistant", "content": "", "tool_calls": calls}),
            ));
        }
        let mut done = reply.clone();
        done["message"] = json!({"role": "assistant", "content": ""});
        out.push(line(done));
        out
    }
}

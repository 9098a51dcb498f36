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

pub mod says;
mod streams;

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
            // A provider takes a long conversation (axum's default stops at 2 MB).
            .layer(axum::extract::DefaultBodyLimit::max(64 << 20))
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

//! Replies streamed as each provider streams them, made from the unstreamed reply: text
//! in small pieces, tool arguments in pieces, usage where the provider puts it, a short
//! pause between messages so that a watcher sees them arrive one by one.

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

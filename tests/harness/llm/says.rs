//! Replies in each wire format.

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

//! Streamed model calls: a reply read as it is generated, its text and reasoning handed
//! on piece by piece ([`Delta`]), and folded back into the reply the same call would
//! have had unstreamed, so that one decoder per wire format reads both.
//!
//! Framing is server-sent events (OpenAI, Anthropic, Gemini `alt=sse`) or one JSON
//! object per line (Ollama). A small reader of our own rather than a crate: the SSE
//! crate under rmcp loses complete events when a bad line shares their chunk (found by
//! fuzzing, see docs/FUZZING.md).

use serde::Serialize;
use serde_json::Value;

use super::{ProviderError, ProviderErrorKind};

/// A piece of a reply as it streams in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Delta {
    /// Answer text.
    Text(String),
    /// Reasoning (thinking) text, where the provider shows it.
    Reasoning(String),
    /// The attempt failed after some pieces were sent and the call is being retried:
    /// what was sent of this reply is void.
    Restart,
}

/// Where deltas go.
pub type DeltaSink<'a> = &'a (dyn Fn(Delta) + Send + Sync);

/// How a stream's messages are framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// Server-sent events; each event's `data` is one message (`[DONE]` ends OpenAI's).
    Sse,
    /// One JSON object per line.
    Ndjson,
}

/// Folds one wire format's stream messages into its unstreamed reply.
pub trait Fold: Default + Send {
    /// One message of the stream; text and reasoning go to `sink` as they come.
    fn push(&mut self, message: Value, sink: DeltaSink<'_>) -> Result<(), ProviderError>;
    /// The reply as the unstreamed call returns it; an error when the stream ended
    /// before the provider said it was complete.
    fn finish(self) -> Result<Value, ProviderError>;
}

/// Splits a byte stream into its messages.
#[derive(Debug)]
pub struct Framer {
    framing: Framing,
    /// Bytes of an unfinished line.
    line: Vec<u8>,
    /// `data` lines of the event being read.
    data: Option<String>,
}

impl Framer {
    pub fn new(framing: Framing) -> Self {
        Self {
            framing,
            line: Vec::new(),
            data: None,
        }
    }

    /// The messages completed by `bytes`.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        for &b in bytes {
            if b == b'\n' {
                let line = std::mem::take(&mut self.line);
                self.line_done(&line, &mut out);
            } else {
                self.line.push(b);
            }
        }
        out
    }

    /// What is left when the stream ends (a last line or event without its newline).
    pub fn finish(mut self) -> Vec<String> {
        let mut out = Vec::new();
        let line = std::mem::take(&mut self.line);
        if !line.is_empty() {
            self.line_done(&line, &mut out);
        }
        self.line_done(b"", &mut out);
        out
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<String>) {
        let line = String::from_utf8_lossy(line);
        let line = line.strip_suffix('\r').unwrap_or(&line);
        match self.framing {
            Framing::Ndjson => {
                if !line.trim().is_empty() {
                    out.push(line.to_owned());
                }
            }
            Framing::Sse => {
                if line.is_empty() {
                    if let Some(data) = self.data.take() {
                        out.push(data);
                    }
                    return;
                }
                // `event:`, `id:`, `retry:` and comments carry nothing a reply needs.
                let Some(value) = line.strip_prefix("data:") else {
                    return;
                };
                let value = value.strip_prefix(' ').unwrap_or(value);
                match &mut self.data {
                    Some(data) => {
                        data.push('\n');
                        data.push_str(value);
                    }
                    None => self.data = Some(value.to_owned()),
                }
            }
        }
    }
}

/// An error the provider reported inside a stream that had started well: Anthropic's
/// `{"type": "error", "error": {…}}`, OpenAI's and Gemini's `{"error": {…}}`, Ollama's
/// `{"error": "…"}`. Overload and rate limits are retryable, as is anything else the
/// provider hit mid-reply.
pub fn stream_error(message: &Value) -> Option<ProviderError> {
    let error = message.get("error")?;
    if error.is_null() {
        return None;
    }
    let text = error
        .get("message")
        .and_then(Value::as_str)
        .or_else(|| error.as_str())
        .unwrap_or("the provider reported an error mid-stream");
    let kind_of = |field: &str| error.get(field).and_then(Value::as_str).unwrap_or("");
    let kind = [kind_of("type"), kind_of("status"), kind_of("code")]
        .iter()
        .find_map(|k| match *k {
            "overloaded_error" | "UNAVAILABLE" => Some(ProviderErrorKind::Overloaded),
            "rate_limit_error" | "RESOURCE_EXHAUSTED" | "rate_limit_exceeded" => {
                Some(ProviderErrorKind::RateLimited)
            }
            "insufficient_quota" => Some(ProviderErrorKind::QuotaExceeded),
            "authentication_error" | "permission_error" => Some(ProviderErrorKind::Auth),
            "invalid_request_error" | "INVALID_ARGUMENT" => Some(ProviderErrorKind::BadRequest),
            _ => None,
        })
        .unwrap_or(ProviderErrorKind::Server);
    Some(ProviderError::new(kind, text))
}

/// A stream that stopped before its provider said the reply was complete.
pub fn ended_early() -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Transport,
        "the provider's stream ended before the reply was complete",
    )
}

/// Appends `more` to the string at `value[key]` (made when missing).
pub(crate) fn append(value: &mut Value, key: &str, more: &str) {
    match value.get_mut(key) {
        Some(Value::String(s)) => s.push_str(more),
        _ => value[key] = Value::String(more.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_split_anywhere_come_out_whole() {
        let body = b"event: message_start\ndata: {\"a\":1}\n\n: comment\ndata: {\"b\":\r\ndata: 2}\r\n\r\ndata: [DONE]\n\n";
        for cut in 0..body.len() {
            let mut framer = Framer::new(Framing::Sse);
            let mut got = framer.push(&body[..cut]);
            got.extend(framer.push(&body[cut..]));
            got.extend(framer.finish());
            assert_eq!(got, ["{\"a\":1}", "{\"b\":\n2}", "[DONE]"], "cut at {cut}");
        }
    }

    #[test]
    fn ndjson_lines_and_a_last_line_without_newline() {
        let mut framer = Framer::new(Framing::Ndjson);
        let mut got = framer.push(b"{\"a\":1}\n\n{\"b\"");
        got.extend(framer.push(b":2}"));
        got.extend(framer.finish());
        assert_eq!(got, ["{\"a\":1}", "{\"b\":2}"]);
    }

    #[test]
    fn errors_inside_a_stream_are_classified() {
        let overloaded = serde_json::json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
        let err = stream_error(&overloaded).expect("an error");
        assert_eq!(err.kind, ProviderErrorKind::Overloaded);
        assert!(err.is_retryable());
        assert_eq!(
            stream_error(&serde_json::json!({"error": "model crashed"})).map(|e| e.kind),
            Some(ProviderErrorKind::Server)
        );
        assert!(stream_error(&serde_json::json!({"choices": []})).is_none());
    }
}

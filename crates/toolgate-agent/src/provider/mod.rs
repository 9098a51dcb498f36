//! LLM providers: one module per documented wire format, behind [`Provider`].
//!
//! Each module builds its request from the neutral history ([`crate::message`]), decodes
//! the reply into a [`ModelTurn`] (text, tool calls, reasoning, stop reason, usage, and the
//! raw JSON kept beside them) and maps HTTP failures to [`ProviderError`]. Decoding is
//! lenient — unknown stop reasons, missing ids, `usage: {}`, `finish_reason: ""` all
//! pass — because OpenAI-compatible servers (vLLM, llama.cpp, LM Studio, OpenRouter) vary.
//!
//! A call is made whole ([`Provider::complete`]) or streamed ([`Provider::stream`]): then
//! text and reasoning are handed on as they arrive ([`stream::Delta`]) and the stream is
//! folded back into the unstreamed reply, read by the same decoder.

pub mod anthropic;
pub mod gemini;
pub mod http;
pub mod ollama;
pub mod openai;
pub mod stream;

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolgate_core::backoff::Backoff;

use crate::message::{AssistantMessage, Message};

/// Which wire format a provider speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    /// OpenAI chat completions; also OpenRouter, vLLM, llama.cpp, LM Studio by base URL.
    Openai,
    /// Anthropic Messages.
    Anthropic,
    /// Google Gemini `generateContent`.
    Gemini,
    /// Ollama `/api/chat`.
    Ollama,
}

impl ProviderKind {
    /// `gen_ai.provider.name`, as the OpenTelemetry GenAI conventions spell the known ones.
    pub fn semconv_name(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gcp.gemini",
            ProviderKind::Ollama => "ollama",
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Ollama => "ollama",
        }
    }
}

/// A tool as declared to the model.
#[derive(Clone, Debug)]
pub struct ToolDecl {
    /// The gateway's name.
    pub name: String,
    /// The name on the wire: `^[a-zA-Z0-9_-]{1,64}$`, which OpenAI and Anthropic demand
    /// (gateway names may also hold dots).
    pub wire_name: String,
    pub description: String,
    pub parameters: Value,
}

impl ToolDecl {
    /// What the provider is told of this tool: its wire name, description and schema.
    pub fn declared(&self) -> toolgate_core::declarations::Declared<'_> {
        toolgate_core::declarations::Declared {
            name: &self.wire_name,
            description: &self.description,
            parameters: &self.parameters,
        }
    }
}

impl ToolDecl {
    /// Declarations for `specs`, with wire names unique among them.
    pub fn for_specs<'a>(
        specs: impl IntoIterator<Item = &'a toolgate_core::ToolSpec>,
    ) -> Vec<ToolDecl> {
        let mut decls: Vec<ToolDecl> = Vec::new();
        for spec in specs {
            let base: String = spec
                .name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let mut wire = base.clone();
            let mut n = 2;
            while decls.iter().any(|d| d.wire_name == wire) {
                let suffix = format!("_{n}");
                let keep = 64usize.saturating_sub(suffix.len()).min(base.len());
                wire = format!("{}{suffix}", &base[..keep]);
                n += 1;
            }
            decls.push(ToolDecl {
                name: spec.name.clone(),
                wire_name: wire,
                description: spec.description.clone(),
                parameters: spec.input_schema.clone(),
            });
        }
        decls
    }
}

/// Whether the model may call tools on this request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ToolChoice {
    Auto,
    /// Tools stay declared (Anthropic refuses a history with tool blocks and no tools) but
    /// the model must answer in text.
    None,
}

/// One model call.
#[derive(Clone, Debug)]
pub struct ModelRequest<'a> {
    pub model: &'a str,
    pub system: Option<&'a str>,
    pub messages: &'a [Message],
    pub tools: &'a [ToolDecl],
    pub tool_choice: ToolChoice,
    /// Off: at most one tool call per turn (sent as `parallel_tool_calls: false` /
    /// `disable_parallel_tool_use: true` where the wire has the switch).
    pub parallel_tool_calls: bool,
    pub temperature: Option<f32>,
    /// Output token limit; Anthropic requires one and gets 4096 when unset.
    pub max_tokens: Option<u32>,
    /// A JSON Schema the answer must match, sent as the wire's native constraint where
    /// it has one that works alongside tools: OpenAI `response_format` (`json_schema`),
    /// Anthropic `output_config.format`, Ollama `format`; Gemini's
    /// `responseJsonSchema` only on a call that declares no tools.
    pub output_schema: Option<&'a Value>,
}

impl ModelRequest<'_> {
    /// The wire name of the gateway tool `name` (itself when not declared).
    pub fn wire_name<'n>(&'n self, name: &'n str) -> &'n str {
        self.tools
            .iter()
            .find(|t| t.name == name)
            .map_or(name, |t| t.wire_name.as_str())
    }

    /// The gateway name of the wire name `wire` (itself when not declared: the loop then
    /// answers "no such tool").
    pub fn gateway_name(&self, wire: &str) -> String {
        self.tools
            .iter()
            .find(|t| t.wire_name == wire)
            .map_or(wire, |t| t.name.as_str())
            .to_owned()
    }
}

/// A 2xx reply that is not in the provider's format.
pub(crate) fn decode_error(message: &str) -> ProviderError {
    ProviderError::new(
        ProviderErrorKind::Decode,
        format!("unexpected reply from the provider: {message}"),
    )
}

/// Token counts of one model call (core's type: a run's row keeps their sum).
pub use toolgate_core::Usage;

/// What one model call returned.
#[derive(Clone, Debug)]
pub struct ModelTurn {
    pub message: AssistantMessage,
    /// The provider's stop reason, verbatim (`tool_calls`, `end_turn`, `STOP`, …).
    pub stop_reason: Option<String>,
    /// `None` when the provider reported none (not the same as zero).
    pub usage: Option<Usage>,
    /// The provider's response body, as received.
    pub raw: Value,
}

/// Whether a stop reason says the provider cut the reply off at the output token limit
/// (OpenAI and Ollama `length`, Anthropic `max_tokens`, Gemini `MAX_TOKENS`): its tool
/// calls may be incomplete, however well-formed they look.
pub fn is_truncation(stop_reason: Option<&str>) -> bool {
    matches!(stop_reason, Some("length" | "max_tokens" | "MAX_TOKENS"))
}

/// What went wrong calling a provider.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderErrorKind {
    /// 429.
    RateLimited,
    /// 402, or a 429 saying the account's spend limit or credit is used up (OpenAI
    /// `insufficient_quota`): final, retrying cannot help.
    QuotaExceeded,
    /// Anthropic 529, Gemini 503 `UNAVAILABLE`, HTTP 503.
    Overloaded,
    /// 401, 403.
    Auth,
    /// Any other 4xx: the request itself is wrong (a gateway bug or a model refusing it).
    BadRequest,
    /// 5xx.
    Server,
    /// No complete answer within the request timeout.
    Timeout,
    /// Connection refused or reset.
    Transport,
    /// A 2xx body that is not the provider's format.
    Decode,
    Cancelled,
}

#[derive(Clone, Debug, Serialize)]
pub struct ProviderError {
    pub kind: ProviderErrorKind,
    pub status: Option<u16>,
    /// The provider's message (never carrying our credentials).
    pub message: String,
    /// From `Retry-After`, when the provider said when to come back.
    #[serde(skip)]
    pub retry_after: Option<Duration>,
}

impl ProviderError {
    pub fn new(kind: ProviderErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            status: None,
            message: message.into(),
            retry_after: None,
        }
    }

    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self.kind {
            ProviderErrorKind::RateLimited
            | ProviderErrorKind::Overloaded
            | ProviderErrorKind::Server
            | ProviderErrorKind::Timeout
            | ProviderErrorKind::Transport => true,
            ProviderErrorKind::Auth
            | ProviderErrorKind::QuotaExceeded
            | ProviderErrorKind::BadRequest
            | ProviderErrorKind::Decode
            | ProviderErrorKind::Cancelled => false,
        }
    }
}

impl fmt::Display for ProviderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.status {
            Some(status) => write!(f, "{:?} (HTTP {status}): {}", self.kind, self.message),
            None => write!(f, "{:?}: {}", self.kind, self.message),
        }
    }
}

impl std::error::Error for ProviderError {}

/// One LLM endpoint. Implementations are cheap to share (`Arc<dyn Provider>`).
#[async_trait::async_trait]
pub trait Provider: Send + Sync {
    fn kind(&self) -> ProviderKind;

    /// One model call, retried on 429/5xx/timeouts as the provider's retry policy says;
    /// returns early with `Cancelled` when `cancel` fires.
    async fn complete(
        &self,
        request: &ModelRequest<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelTurn, ProviderError>;

    /// As [`Provider::complete`], streamed: text and reasoning go to `sink` as they are
    /// generated (a [`stream::Delta::Restart`] before a retry that follows some). Whole
    /// by default, for providers that cannot stream.
    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        cancel: &CancellationToken,
        sink: stream::DeltaSink<'_>,
    ) -> Result<ModelTurn, ProviderError> {
        let _ = sink;
        self.complete(request, cancel).await
    }
}

/// One wire format: where a request goes, how it is built, how the reply is read. The
/// HTTP side (credentials, retries, cancellation) is [`Client`]'s, the same for all.
pub trait WireFormat: Send + Sync + 'static {
    const KIND: ProviderKind;
    /// The path under the base URL.
    fn path(request: &ModelRequest<'_>) -> String;
    fn request_body(request: &ModelRequest<'_>) -> Value;
    fn decode(request: &ModelRequest<'_>, raw: Value) -> Result<ModelTurn, ProviderError>;
    /// How a streamed reply is framed, and folded back into the unstreamed one.
    const FRAMING: stream::Framing = stream::Framing::Sse;
    type Fold: stream::Fold;
    /// The path of a streamed call.
    fn stream_path(request: &ModelRequest<'_>) -> String {
        Self::path(request)
    }
    /// The body of a streamed call: the unstreamed one saying `stream: true`.
    fn stream_body(request: &ModelRequest<'_>) -> Value {
        let mut body = Self::request_body(request);
        body["stream"] = Value::Bool(true);
        body
    }
}

/// A provider endpoint speaking wire format `W`.
pub struct Client<W> {
    http: http::HttpClient,
    wire: std::marker::PhantomData<fn() -> W>,
}

impl<W: WireFormat> Client<W> {
    pub fn new(http: http::HttpClient) -> Self {
        Self {
            http,
            wire: std::marker::PhantomData,
        }
    }
}

#[async_trait::async_trait]
impl<W: WireFormat> Provider for Client<W> {
    fn kind(&self) -> ProviderKind {
        W::KIND
    }

    async fn complete(
        &self,
        request: &ModelRequest<'_>,
        cancel: &CancellationToken,
    ) -> Result<ModelTurn, ProviderError> {
        let url = self.http.url(&W::path(request));
        let body = W::request_body(request);
        let raw = self.http.post_json(&url, &body, cancel).await?;
        W::decode(request, raw)
    }

    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        cancel: &CancellationToken,
        sink: stream::DeltaSink<'_>,
    ) -> Result<ModelTurn, ProviderError> {
        let url = self.http.url(&W::stream_path(request));
        let body = W::stream_body(request);
        let raw = self
            .http
            .post_stream::<W::Fold>(&url, &body, W::FRAMING, cancel, sink)
            .await?;
        W::decode(request, raw)
    }
}

/// Builds the provider for `config`.
pub fn build(config: &ProviderConfig) -> Result<std::sync::Arc<dyn Provider>, String> {
    let http = http::HttpClient::new(config)?;
    Ok(match config.kind {
        ProviderKind::Openai => std::sync::Arc::new(Client::<openai::OpenAi>::new(http)),
        ProviderKind::Anthropic => std::sync::Arc::new(Client::<anthropic::Anthropic>::new(http)),
        ProviderKind::Gemini => std::sync::Arc::new(Client::<gemini::Gemini>::new(http)),
        ProviderKind::Ollama => std::sync::Arc::new(Client::<ollama::Ollama>::new(http)),
    })
}

/// The text at `key` of a reply's object, when it is text.
pub(crate) fn text_field(object: &Value, key: &str) -> Option<String> {
    object.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// Appends `item` to the `key` list (`content`, `parts`) of the last message when it is
/// the user's, else starts a user message: Anthropic and Gemini want a turn's tool results
/// in one user message, and text after them in the same one.
pub(crate) fn push_to_user(messages: &mut Vec<Value>, key: &str, item: Value) {
    if let Some(last) = messages.last_mut()
        && last["role"] == "user"
        && let Some(list) = last[key].as_array_mut()
    {
        list.push(item);
        return;
    }
    messages.push(serde_json::json!({"role": "user", key: [item]}));
}

/// How to reach one provider endpoint: set by the operator, never by tenants (so a
/// tenant cannot point the gateway's HTTP client at an internal address).
#[derive(Clone)]
pub struct ProviderConfig {
    pub kind: ProviderKind,
    /// Taken verbatim: `https://api.openai.com/v1`, `https://openrouter.ai/api/v1`,
    /// `https://api.anthropic.com`, `https://generativelanguage.googleapis.com`,
    /// `http://127.0.0.1:11434`.
    pub base_url: String,
    pub api_key: Option<String>,
    /// Extra headers on every request (OpenRouter's `HTTP-Referer`, `X-Title`).
    pub headers: Vec<(String, String)>,
    /// One attempt's time limit.
    pub timeout: Duration,
    pub retry: RetryPolicy,
}

impl fmt::Debug for ProviderConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProviderConfig")
            .field("kind", &self.kind)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("retry", &self.retry)
            .finish()
    }
}

/// Retries on retryable failures: the gateway's [`Backoff`] from `base_delay` up to
/// `max_delay`, or the provider's `Retry-After` when it gives one (up to `max_delay`).
#[derive(Clone, Copy, Debug)]
pub struct RetryPolicy {
    /// Attempts after the first.
    pub max_retries: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_retries: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// How long to wait before retry number `attempt` (1-based) after `err`.
    pub fn delay(&self, attempt: u32, err: &ProviderError) -> Duration {
        if let Some(after) = err.retry_after {
            return after.min(self.max_delay);
        }
        Backoff::new(self.base_delay, self.max_delay).delay(attempt)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_is_capped_and_honours_retry_after() {
        let policy = RetryPolicy {
            max_retries: 10,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_secs(2),
        };
        let err = ProviderError::new(ProviderErrorKind::Server, "boom");
        for attempt in 1..=10 {
            let d = policy.delay(attempt, &err);
            let cap = Duration::from_millis(100 * 2u64.pow(attempt - 1)).min(policy.max_delay);
            assert!(d <= cap, "attempt {attempt}: {d:?} > {cap:?}");
        }
        let mut limited = ProviderError::new(ProviderErrorKind::RateLimited, "slow down");
        limited.retry_after = Some(Duration::from_secs(1));
        assert_eq!(policy.delay(1, &limited), Duration::from_secs(1));
        limited.retry_after = Some(Duration::from_secs(60));
        assert_eq!(policy.delay(1, &limited), Duration::from_secs(2));
    }

    #[test]
    fn wire_names_are_what_providers_accept_and_unique() {
        use serde_json::json;
        let spec = |name: &str| toolgate_core::ToolSpec::new(name, "d", json!({"type": "object"}));
        let specs = [
            spec("fs.read"),
            spec("fs_read"),
            spec("fs-read"),
            spec(&"x.".repeat(32)),
        ];
        let decls = ToolDecl::for_specs(specs.iter());
        let wire: Vec<&str> = decls.iter().map(|d| d.wire_name.as_str()).collect();
        assert_eq!(&wire[..3], ["fs_read", "fs_read_2", "fs-read"]);
        for w in &wire {
            assert!(
                w.len() <= 64
                    && w.bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-'),
                "{w}"
            );
        }
        let tools = decls.clone();
        let request = ModelRequest {
            model: "m",
            system: None,
            messages: &[],
            tools: &tools,
            tool_choice: ToolChoice::Auto,
            parallel_tool_calls: true,
            temperature: None,
            max_tokens: None,
            output_schema: None,
        };
        assert_eq!(request.gateway_name("fs_read"), "fs.read");
        assert_eq!(request.gateway_name("fs_read_2"), "fs_read");
        assert_eq!(request.wire_name("fs.read"), "fs_read");
        assert_eq!(request.gateway_name("unknown"), "unknown");
    }

    #[test]
    fn credentials_never_print() {
        let config = ProviderConfig {
            kind: ProviderKind::Openai,
            base_url: "http://127.0.0.1:1/v1".into(),
            api_key: Some("sk-very-secret".into()),
            headers: vec![("X-Title".into(), "also-secret".into())],
            timeout: Duration::from_secs(1),
            retry: RetryPolicy::default(),
        };
        let printed = format!("{config:?}");
        assert!(!printed.contains("sk-very-secret"), "{printed}");
        assert!(!printed.contains("also-secret"), "{printed}");
    }
}

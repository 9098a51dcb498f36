//! The instruments every part of the gateway records into, on one OpenTelemetry `Meter`.
//!
//! The server gives them a meter whose readers export to Prometheus (`/metrics`) and, when
//! configured, OTLP; tests and embedded uses get the no-op meter, where recording costs a
//! branch. Names follow the OpenTelemetry semantic conventions where one exists
//! (`mcp.server.operation.duration`, `gen_ai.client.*`), and `toolgate.*` otherwise.
//!
//! Tenant ids join the attributes only when the operator allows it
//! (`telemetry.tenant_attributes`): with many tenants they multiply every series.

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::metrics::{Counter, Histogram, Meter, MeterProvider};

use crate::{Adapter, ErrorKind, TenantId};

/// Bucket boundaries for durations in seconds, from 1 ms to 2 min (the SDK's defaults
/// suit milliseconds).
pub const DURATION_BUCKETS: [f64; 15] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];

/// Bucket boundaries for token counts (`gen_ai.client.token.usage`, as the conventions
/// advise).
pub const TOKEN_BUCKETS: [f64; 14] = [
    1.0, 4.0, 16.0, 64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
    16777216.0, 67108864.0,
];

/// One MCP request as `mcp.server.operation.duration` records it (MCP semantic
/// conventions); every name here has a bounded set of values.
#[derive(Debug)]
pub struct McpOperation<'a> {
    pub method: &'a str,
    /// A tool that exists.
    pub tool: Option<&'a str>,
    /// A prompt that was found.
    pub prompt: Option<&'a str>,
    pub protocol_version: Option<&'a str>,
    /// `network.protocol.version`: `1.1`, `2`.
    pub http_version: Option<&'static str>,
    /// `error.type`: the JSON-RPC error code, `tool_error`, or the HTTP status.
    pub error: Option<&'a str>,
    /// `rpc.response.status_code`: the JSON-RPC error code of the answer, if it has one.
    pub status_code: Option<&'a str>,
    pub duration: Duration,
}

/// The gateway's instruments. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Metrics {
    tenant_attributes: bool,
    tool_calls: Counter<u64>,
    tool_duration: Histogram<f64>,
    rejections: Counter<u64>,
    cache: Counter<u64>,
    audit_commit: Histogram<f64>,
    mcp_operation: Histogram<f64>,
    chat_duration: Histogram<f64>,
    token_usage: Histogram<u64>,
    runs_finished: Counter<u64>,
}

impl Default for Metrics {
    /// Records nothing.
    fn default() -> Self {
        Self::new(
            &opentelemetry::metrics::noop::NoopMeterProvider::new().meter("toolgate"),
            false,
        )
    }
}

impl Metrics {
    pub fn new(meter: &Meter, tenant_attributes: bool) -> Self {
        let seconds = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(DURATION_BUCKETS.to_vec())
                .build()
        };
        Self {
            tenant_attributes,
            tool_calls: meter
                .u64_counter("toolgate.tool.calls")
                .with_unit("{call}")
                .with_description("Tool calls finished, by tool, outcome and front door")
                .build(),
            tool_duration: seconds(
                "toolgate.tool.call.duration",
                "Duration of tool calls through the executor (gen_ai.operation.name execute_tool)",
            ),
            rejections: meter
                .u64_counter("toolgate.admission.rejections")
                .with_unit("{call}")
                .with_description(
                    "Calls refused before running: rate limits, concurrency limits, load shedding",
                )
                .build(),
            cache: meter
                .u64_counter("toolgate.tool.cache")
                .with_unit("{call}")
                .with_description(
                    "Calls of cached tools, by tool and toolgate.cache.result (hit, miss, bypass)",
                )
                .build(),
            audit_commit: seconds(
                "toolgate.audit.commit.duration",
                "Duration of one audit transaction (a batch of records)",
            ),
            mcp_operation: seconds(
                "mcp.server.operation.duration",
                "MCP request or notification duration as observed on the receiver",
            ),
            chat_duration: seconds(
                "gen_ai.client.operation.duration",
                "GenAI operation duration (agent chat calls to model providers)",
            ),
            token_usage: meter
                .u64_histogram("gen_ai.client.token.usage")
                .with_unit("{token}")
                .with_description("Number of input and output tokens used")
                .with_boundaries(TOKEN_BUCKETS.to_vec())
                .build(),
            runs_finished: meter
                .u64_counter("toolgate.runs.finished")
                .with_unit("{run}")
                .with_description(
                    "Agent runs ended on this instance, by toolgate.run.status (completed, failed, cancelled)",
                )
                .build(),
        }
    }

    fn tenant(&self, attrs: &mut Vec<KeyValue>, tenant: TenantId) {
        if self.tenant_attributes {
            attrs.push(KeyValue::new("toolgate.tenant", tenant.to_string()));
        }
    }

    /// A finished tool call.
    pub fn tool_call(
        &self,
        tenant: TenantId,
        tool: &str,
        adapter: Adapter,
        error: Option<ErrorKind>,
        duration: Duration,
    ) {
        let mut attrs = Vec::with_capacity(5);
        attrs.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
        attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        attrs.push(KeyValue::new("toolgate.adapter", adapter.as_str()));
        if let Some(kind) = error {
            attrs.push(KeyValue::new("error.type", kind.as_str()));
        }
        self.tenant(&mut attrs, tenant);
        self.tool_duration.record(duration.as_secs_f64(), &attrs);
        attrs.push(KeyValue::new(
            "toolgate.outcome",
            error.map_or("ok", ErrorKind::as_str),
        ));
        self.tool_calls.add(1, &attrs);
    }

    /// A call (or stream, or run start) refused by `limit`.
    pub fn rejected(&self, tenant: TenantId, limit: crate::limits::Limit, adapter: Adapter) {
        let mut attrs = vec![
            KeyValue::new("toolgate.limit", limit.as_str()),
            KeyValue::new("toolgate.adapter", adapter.as_str()),
        ];
        self.tenant(&mut attrs, tenant);
        self.rejections.add(1, &attrs);
    }

    /// A call of a tool whose results are cached, and what the cache did for it.
    pub fn cache(&self, tenant: TenantId, tool: &str, status: crate::cache::CacheStatus) {
        let mut attrs = vec![
            KeyValue::new("gen_ai.tool.name", tool.to_owned()),
            KeyValue::new("toolgate.cache.result", status.as_str()),
        ];
        self.tenant(&mut attrs, tenant);
        self.cache.add(1, &attrs);
    }

    /// An agent run ended (`status`: `completed`, `failed` or `cancelled`; a run paused
    /// for approval has not ended).
    pub fn run_finished(&self, tenant: TenantId, status: crate::stores::RunStatus) {
        if !status.is_terminal() {
            return;
        }
        let mut attrs = vec![KeyValue::new("toolgate.run.status", status.as_str())];
        self.tenant(&mut attrs, tenant);
        self.runs_finished.add(1, &attrs);
    }

    /// One audit transaction (a batch of records), committed or failed.
    pub fn audit_committed(&self, duration: Duration, ok: bool) {
        let attrs: &[KeyValue] = if ok {
            &[]
        } else {
            &[KeyValue::new("error.type", "store")]
        };
        self.audit_commit.record(duration.as_secs_f64(), attrs);
    }

    /// One MCP request handled: `mcp.server.operation.duration`.
    pub fn mcp_operation(&self, op: &McpOperation<'_>) {
        let mut attrs = Vec::with_capacity(8);
        attrs.push(KeyValue::new("mcp.method.name", op.method.to_owned()));
        attrs.push(KeyValue::new("network.transport", "tcp"));
        attrs.push(KeyValue::new("network.protocol.name", "http"));
        if let Some(version) = op.http_version {
            attrs.push(KeyValue::new("network.protocol.version", version));
        }
        if op.method == "tools/call" {
            attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
        }
        if let Some(tool) = op.tool {
            attrs.push(KeyValue::new("gen_ai.tool.name", tool.to_owned()));
        }
        if let Some(prompt) = op.prompt {
            attrs.push(KeyValue::new("gen_ai.prompt.name", prompt.to_owned()));
        }
        if let Some(version) = op.protocol_version {
            attrs.push(KeyValue::new("mcp.protocol.version", version.to_owned()));
        }
        if let Some(error) = op.error {
            attrs.push(KeyValue::new("error.type", error.to_owned()));
        }
        if let Some(code) = op.status_code {
            attrs.push(KeyValue::new("rpc.response.status_code", code.to_owned()));
        }
        self.mcp_operation.record(op.duration.as_secs_f64(), &attrs);
    }

    /// One chat call to a model provider, with the tokens it used when it answered.
    pub fn chat(
        &self,
        provider: &str,
        model: &str,
        error: Option<&str>,
        duration: Duration,
        input_tokens: Option<u64>,
        output_tokens: Option<u64>,
    ) {
        let mut attrs = vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", provider.to_owned()),
            KeyValue::new("gen_ai.request.model", model.to_owned()),
        ];
        if let Some(error) = error {
            attrs.push(KeyValue::new("error.type", error.to_owned()));
        }
        self.chat_duration.record(duration.as_secs_f64(), &attrs);
        for (kind, tokens) in [("input", input_tokens), ("output", output_tokens)] {
            if let Some(tokens) = tokens {
                let mut attrs = attrs.clone();
                attrs.push(KeyValue::new("gen_ai.token.type", kind));
                self.token_usage.record(tokens, &attrs);
            }
        }
    }
}

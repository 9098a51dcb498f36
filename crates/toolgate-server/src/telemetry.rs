//! The `tracing` subscriber: filter from `log.filter` (or `RUST_LOG`), text or JSON lines
//! on stderr; and, when OTLP is configured, spans exported to an OpenTelemetry collector.
//!
//! Lines are written by a background thread (`tracing-appender`), so a request never
//! waits on a `write(2)` to stderr; the queue is bounded and, when full, callers wait
//! rather than lose lines. Keep the returned guard alive until exit: dropping it flushes
//! the log and the spans not yet exported.
//!
//! **Traces** (and metrics, beside `/metrics`: see `crate::metrics`) are off unless an
//! OTLP endpoint is given: `telemetry.otlp_endpoint`, or the
//! standard `OTEL_EXPORTER_OTLP_ENDPOINT` / `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! (`OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn them off again). They go
//! over OTLP/HTTP with protobuf; `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_EXPORTER_OTLP_HEADERS` and the batch processor's `OTEL_BSP_*` apply. Exported
//! spans are only those of target `toolgate::otel` (the MCP server span, `execute_tool`,
//! …), whatever the log filter; with traces off their callsites are disabled and cost
//! nothing.

use std::io::IsTerminal;

use anyhow::Context as _;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::Layer;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::{LogConfig, LogFormat, TelemetryConfig};

/// The target of the spans exported over OTLP.
pub const OTEL_TARGET: &str = "toolgate::otel";

/// Keeps the log writer and the span exporter alive; flushes both when dropped.
pub struct Guard {
    _log: WorkerGuard,
    tracer: Option<SdkTracerProvider>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(tracer) = self.tracer.take()
            && let Err(err) = tracer.shutdown()
        {
            eprintln!("toolgate: spans not exported at exit: {err}");
        }
    }
}

/// Where OTLP goes, if anywhere: `Some(None)` leaves the endpoint to the `OTEL_*`
/// variables; `Some(Some(url))` is `telemetry.otlp_endpoint` plus the signal's path.
pub fn otlp_endpoint(
    config: &TelemetryConfig,
    env: &dyn Fn(&str) -> Option<String>,
    signal: &str,
) -> Option<Option<String>> {
    let off = |name: &str, value: &str| env(name).is_some_and(|v| v.eq_ignore_ascii_case(value));
    if off("OTEL_SDK_DISABLED", "true") {
        return None;
    }
    if let Some(base) = &config.otlp_endpoint {
        return Some(Some(format!("{}/v1/{signal}", base.trim_end_matches('/'))));
    }
    let specific = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.to_uppercase());
    (env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some() || env(&specific).is_some()).then_some(None)
}

/// An environment variable's value, when set and not empty.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Refuses an OTLP protocol this build does not speak (only `http/protobuf`).
pub fn check_protocol() -> anyhow::Result<()> {
    for name in [
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
    ] {
        if let Some(protocol) = env(name)
            && protocol != "http/protobuf"
        {
            anyhow::bail!("{name}={protocol}: toolgate exports OTLP over http/protobuf only");
        }
    }
    Ok(())
}

/// Installs the global subscriber. `rust_log` is the `RUST_LOG` value, if set.
pub fn init(
    config: &LogConfig,
    telemetry: &TelemetryConfig,
    rust_log: Option<String>,
) -> anyhow::Result<Guard> {
    let filter = EnvFilter::try_new(rust_log.as_deref().unwrap_or(&config.filter))?
        // The exported spans are not log lines.
        .add_directive(format!("{OTEL_TARGET}=off").parse()?);
    let ansi = std::io::stderr().is_terminal();
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("toolgate-log")
        .finish(std::io::stderr());
    let lines = match config.format {
        LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_ansi(ansi)
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
        LogFormat::Json => tracing_subscriber::fmt::layer()
            .json()
            .with_writer(writer)
            .with_filter(filter)
            .boxed(),
    };
    let tracer = match otlp_endpoint(telemetry, &env, "traces")
        .filter(|_| env("OTEL_TRACES_EXPORTER").is_none_or(|v| v != "none"))
    {
        Some(endpoint) => {
            check_protocol()?;
            let mut exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
            if let Some(endpoint) = endpoint {
                exporter = exporter.with_endpoint(endpoint);
            }
            let exporter = exporter
                .build()
                .context("setting up the OTLP span exporter")?;
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_resource(resource())
                    .build(),
            )
        }
        None => None,
    };
    let spans = tracer.as_ref().map(|provider| {
        tracing_opentelemetry::layer()
            .with_tracer(provider.tracer("toolgate"))
            // Only the conventions' attributes: no source locations, threads, busy/idle
            // times or tracing targets on every span.
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_target(false)
            .with_filter(Targets::new().with_target(OTEL_TARGET, tracing::Level::TRACE))
    });
    // Not `.with(Option<Layer>)`: an absent layer counts as interested in every
    // callsite, which would enable the exported spans' callsites with traces off.
    let registry = tracing_subscriber::registry().with(lines);
    match spans {
        Some(spans) => registry.with(spans).try_init()?,
        None => registry.try_init()?,
    }
    Ok(Guard {
        _log: guard,
        tracer,
    })
}

/// `service.name` (from `OTEL_SERVICE_NAME`, else `toolgate`) and the SDK's detectors.
pub fn resource() -> opentelemetry_sdk::Resource {
    let builder = opentelemetry_sdk::Resource::builder();
    if env("OTEL_SERVICE_NAME").is_some() {
        builder.build()
    } else {
        builder.with_service_name("toolgate").build()
    }
}

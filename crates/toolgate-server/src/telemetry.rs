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
//! over OTLP/HTTP with protobuf, or over gRPC (`telemetry.otlp_protocol = "grpc"` or
//! `OTEL_EXPORTER_OTLP_PROTOCOL=grpc`); `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
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

use std::net::SocketAddr;

use serde::Deserialize;
use toolgate_core::settings::{Problems, http_url};

/// `[log]`: what is logged, and how.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `tracing` filter directives, e.g. `info,toolgate=debug`. `RUST_LOG` overrides it.
    pub filter: String,
    pub format: LogFormat,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            // rmcp logs a few `info` lines for every stateless request and session (service
            // initialized, input stream terminated, serve finished): noise at a gateway, and
            // about 5 µs of a 2026-07-28 call's CPU. Its warnings and errors still show.
            filter: "info,rmcp=warn".to_owned(),
            format: LogFormat::Text,
        }
    }
}

/// `[telemetry]`: metrics (Prometheus at `/metrics`) and their attributes.
#[derive(Clone, Debug, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Record metrics (on by default). Off: instruments record nothing and `/metrics`
    /// answers 404.
    pub metrics: bool,
    /// Add the tenant id to metric attributes. Off by default: every series is multiplied
    /// by the number of tenants; turn it on only when they are few.
    pub tenant_attributes: bool,
    /// A second listener serving only `GET /metrics`, without credentials (for a
    /// Prometheus scraper inside the deployment's network). On the main listener,
    /// `/metrics` needs the operator scope `tenants:manage`.
    pub metrics_listen: Option<SocketAddr>,
    /// Export spans and metrics over OTLP to this URL: a base URL over HTTP
    /// (`http://collector:4318`), the collector's address over gRPC
    /// (`http://collector:4317`); the standard `OTEL_EXPORTER_OTLP_ENDPOINT` does the same.
    /// Off when neither is set.
    pub otlp_endpoint: Option<String>,
    /// `"http/protobuf"` (the default) or `"grpc"`; the standard
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` (and its per-signal forms) does the same.
    pub otlp_protocol: Option<OtlpProtocol>,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            metrics: true,
            tenant_attributes: false,
            metrics_listen: None,
            otlp_endpoint: None,
            otlp_protocol: None,
        }
    }
}

impl TelemetryConfig {
    /// What is wrong with `[telemetry]`, by key within it.
    pub fn problems(&self) -> Problems {
        let mut problems = Problems::new();
        if let Some(url) = &self.otlp_endpoint
            && let Err(problem) = http_url(url)
        {
            problems.push(("otlp_endpoint".into(), problem));
        }
        problems
    }
}

impl LogConfig {
    /// What is wrong with `[log]`, by key within it.
    pub fn problems(&self) -> Problems {
        match EnvFilter::try_new(&self.filter) {
            Ok(_) => Problems::new(),
            Err(e) => vec![("filter".into(), e.to_string())],
        }
    }
}

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

/// How OTLP goes out: `telemetry.otlp_protocol`, else the signal's or the general
/// `OTEL_EXPORTER_OTLP_*PROTOCOL`, else `http/protobuf` (the specification's default).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize)]
pub enum OtlpProtocol {
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    #[serde(rename = "grpc")]
    Grpc,
}

impl OtlpProtocol {
    fn parse(name: &str, value: &str) -> anyhow::Result<Self> {
        match value {
            "http/protobuf" => Ok(Self::HttpProtobuf),
            "grpc" => Ok(Self::Grpc),
            _ => anyhow::bail!(
                "{name}={value}: toolgate exports OTLP over \"http/protobuf\" or \"grpc\""
            ),
        }
    }
}

/// One signal's OTLP export: the protocol, and the endpoint when the configuration names
/// it (`None` leaves it to the `OTEL_*` variables).
#[derive(Debug, PartialEq, Eq)]
pub struct Otlp {
    pub protocol: OtlpProtocol,
    pub endpoint: Option<String>,
    /// The endpoint, configured or from the variables, is `https://`.
    pub tls: bool,
}

/// Where a signal (`traces`, `metrics`) goes over OTLP, if anywhere. Off unless an
/// endpoint is given (`telemetry.otlp_endpoint` or the standard variables); off again
/// with `OTEL_SDK_DISABLED=true` or `OTEL_{SIGNAL}_EXPORTER=none`. Over HTTP,
/// `telemetry.otlp_endpoint` is a base URL and gets the signal's path (`/v1/traces`);
/// over gRPC it is used as it is.
pub fn otlp(
    config: &TelemetryConfig,
    env: &dyn Fn(&str) -> Option<String>,
    signal: &str,
) -> anyhow::Result<Option<Otlp>> {
    let upper = signal.to_uppercase();
    let is = |name: &str, value: &str| env(name).is_some_and(|v| v.eq_ignore_ascii_case(value));
    if is("OTEL_SDK_DISABLED", "true") || is(&format!("OTEL_{upper}_EXPORTER"), "none") {
        return Ok(None);
    }
    let specific = format!("OTEL_EXPORTER_OTLP_{upper}_ENDPOINT");
    if config.otlp_endpoint.is_none()
        && env("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
        && env(&specific).is_none()
    {
        return Ok(None);
    }
    let protocol = match config.otlp_protocol {
        Some(protocol) => protocol,
        None => [
            format!("OTEL_EXPORTER_OTLP_{upper}_PROTOCOL"),
            "OTEL_EXPORTER_OTLP_PROTOCOL".to_owned(),
        ]
        .iter()
        .find_map(|name| env(name).map(|value| OtlpProtocol::parse(name, &value)))
        .transpose()?
        .unwrap_or(OtlpProtocol::HttpProtobuf),
    };
    let endpoint = config.otlp_endpoint.as_deref().map(|base| match protocol {
        OtlpProtocol::HttpProtobuf => format!("{}/v1/{signal}", base.trim_end_matches('/')),
        OtlpProtocol::Grpc => base.to_owned(),
    });
    let tls = [
        config.otlp_endpoint.clone(),
        env(&specific),
        env("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ]
    .into_iter()
    .flatten()
    .next()
    .is_some_and(|url| url.to_ascii_lowercase().starts_with("https://"));
    Ok(Some(Otlp {
        protocol,
        endpoint,
        tls,
    }))
}

impl Otlp {
    /// Builds the signal's exporter (`SpanExporter::builder()`, …) for this protocol.
    ///
    /// A gRPC exporter is built inside a runtime of its own: tonic's channel spawns its
    /// connection onto the runtime it is created in, and the SDK's batch processor and
    /// periodic reader export from plain threads that only wait on that connection. On
    /// the server's runtime, the flush at exit (which blocks the thread dropping the
    /// guard) and every export under load would depend on a free worker of the runtime
    /// they compete with; on its own thread they depend on nothing.
    pub fn build<B, E>(
        &self,
        builder: B,
        http: impl FnOnce(B) -> anyhow::Result<E>,
        grpc: impl FnOnce(B) -> anyhow::Result<E>,
    ) -> anyhow::Result<E> {
        match self.protocol {
            OtlpProtocol::HttpProtobuf => http(builder),
            OtlpProtocol::Grpc => {
                let _entered = grpc_runtime()?.enter();
                grpc(builder)
            }
        }
    }
}

/// The one thread that drives OTLP/gRPC connections (see [`Otlp::build`]).
fn grpc_runtime() -> anyhow::Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(runtime) = RUNTIME.get() {
        return Ok(runtime);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("toolgate-otlp")
        .enable_all()
        .build()
        .context("starting the OTLP/gRPC runtime")?;
    Ok(RUNTIME.get_or_init(|| runtime))
}

/// An environment variable's value, when set and not empty.
pub(crate) fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
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
    // The log thread writes every line it finds queued, then flushes: buffered, the lines
    // of one wake-up leave in one `write` instead of one each (stderr is unbuffered).
    let (writer, guard) = NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("toolgate-log")
        .finish(std::io::BufWriter::with_capacity(
            64 * 1024,
            std::io::stderr(),
        ));
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
    let tracer = match otlp(telemetry, &env, "traces")? {
        Some(otlp) => {
            use opentelemetry_otlp::SpanExporter;
            let exporter = otlp
                .build(
                    SpanExporter::builder(),
                    |b| Ok(with_endpoint(b.with_http(), &otlp).build()?),
                    |b| Ok(with_endpoint(tonic(b.with_tonic(), &otlp), &otlp).build()?),
                )
                .context("setting up the OTLP span exporter")?;
            // The sampler `OTEL_TRACES_SAMPLER` describes decides at each trace's root,
            // before any span is built (see `toolgate_core::context::set_sampler`): a
            // trace it skips costs nothing more. The tracer records what it is given.
            toolgate_core::context::set_sampler(
                opentelemetry_sdk::trace::Config::default().sampler,
            );
            Some(
                SdkTracerProvider::builder()
                    .with_batch_exporter(exporter)
                    .with_sampler(opentelemetry_sdk::trace::Sampler::AlwaysOn)
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
            // Parents come from the `tracing` span stack and explicit remote parents; no
            // OpenTelemetry instrumentation here reads `Context::current()`, so entering a
            // span (every poll of an instrumented future) need not attach its context.
            .with_context_activation(false)
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

/// A gRPC exporter builder, with TLS verified against the system's roots when the
/// endpoint is `https://` (tonic's own default trusts no root at all).
pub fn tonic<B: opentelemetry_otlp::WithTonicConfig>(builder: B, otlp: &Otlp) -> B {
    use opentelemetry_otlp::tonic_types::transport::ClientTlsConfig;
    if otlp.tls {
        builder.with_tls_config(ClientTlsConfig::new().with_enabled_roots())
    } else {
        builder
    }
}

/// The protocol, and the configured endpoint if any (else the `OTEL_*` variables'), on an
/// exporter builder.
pub fn with_endpoint<B: WithExportConfig>(builder: B, otlp: &Otlp) -> B {
    let builder = builder.with_protocol(match otlp.protocol {
        OtlpProtocol::HttpProtobuf => opentelemetry_otlp::Protocol::HttpBinary,
        OtlpProtocol::Grpc => opentelemetry_otlp::Protocol::Grpc,
    });
    match &otlp.endpoint {
        Some(endpoint) => builder.with_endpoint(endpoint.clone()),
        None => builder,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn resolve(config: &TelemetryConfig, vars: &[(&str, &str)]) -> Option<Otlp> {
        try_resolve(config, vars).expect("a valid configuration")
    }

    fn try_resolve(
        config: &TelemetryConfig,
        vars: &[(&str, &str)],
    ) -> anyhow::Result<Option<Otlp>> {
        let env = |name: &str| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        };
        otlp(config, &env, "traces")
    }

    #[test]
    fn otlp_is_off_without_an_endpoint_and_when_disabled() {
        let none = TelemetryConfig::default();
        assert_eq!(resolve(&none, &[]), None);
        assert_eq!(
            resolve(&none, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]),
            None
        );
        let at = [("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318")];
        assert!(resolve(&none, &at).is_some());
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(resolve(&none, &[at[0], off]), None);
        }
    }

    #[test]
    fn the_protocol_comes_from_config_then_the_signals_variable_then_the_general_one() {
        let base = TelemetryConfig {
            otlp_endpoint: Some("http://collector:4317/".into()),
            ..TelemetryConfig::default()
        };
        assert_eq!(
            resolve(&base, &[]),
            Some(Otlp {
                protocol: OtlpProtocol::HttpProtobuf,
                endpoint: Some("http://collector:4317/v1/traces".into()),
                tls: false,
            })
        );
        let grpc = resolve(&base, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert_eq!(
            grpc,
            Some(Otlp {
                protocol: OtlpProtocol::Grpc,
                endpoint: Some("http://collector:4317/".into()),
                tls: false,
            })
        );
        let vars = [
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ];
        let specific = resolve(&base, &vars).expect("on");
        assert_eq!(specific.protocol, OtlpProtocol::HttpProtobuf);
        let configured = TelemetryConfig {
            otlp_protocol: Some(OtlpProtocol::Grpc),
            ..base.clone()
        };
        let wins = resolve(&configured, &vars).expect("on");
        assert_eq!(wins.protocol, OtlpProtocol::Grpc);
        let secure = [("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "HTTPS://c:4317")];
        let none = TelemetryConfig::default();
        assert!(resolve(&none, &secure).expect("on").tls);
        let json = try_resolve(&base, &[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert!(
            json.expect_err("refused").to_string().contains("http/json"),
            "a protocol this build does not speak is a start-up error"
        );
    }
}

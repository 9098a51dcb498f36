//! The gateway's metrics: one OpenTelemetry meter provider per gateway, read by a
//! Prometheus exporter for `GET /metrics`.
//!
//! `/metrics` on the main listener needs the operator scope `tenants:manage` (the series
//! span tenants); `telemetry.metrics_listen` serves it without credentials on an address
//! of its own, for a scraper inside the deployment's network.
//!
//! Instruments recorded where things happen live in `toolgate_core::metrics`; gauges of
//! state (audit backlog, calls in flight, open streams and sessions, pending approvals,
//! runs still going, instances) are observed here, when scraped. Counts that need the store
//! are refreshed in the background every [`COUNTS_EVERY`], never on a scrape.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use anyhow::Context as _;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, AsyncInstrumentBuilder, Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use prometheus::{Encoder, TextEncoder};
use tokio_util::sync::CancellationToken;
use toolgate_core::metrics::Metrics;
use toolgate_core::stores::RunStatus;
use toolgate_store::instances::Counts;

use crate::error::ApiError;

/// How often store-backed gauges (approvals pending, runs still going) are recounted.
pub const COUNTS_EVERY: Duration = Duration::from_secs(15);

/// The statuses `toolgate.runs` reports: a run's life until it ends. Finished runs are
/// counted as they end (`toolgate.runs.finished`), not recounted from the whole history.
const LIVE_RUN_STATUSES: [RunStatus; 2] = [RunStatus::Running, RunStatus::AwaitingApproval];

/// The meter provider and what reads it.
pub struct Telemetry {
    provider: SdkMeterProvider,
    registry: prometheus::Registry,
    meter: Meter,
    metrics: Metrics,
    counts: Arc<Mutex<Counts>>,
    enabled: bool,
}

impl Telemetry {
    pub fn new(config: &crate::telemetry::TelemetryConfig) -> anyhow::Result<Self> {
        let registry = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()?;
        let mut provider = SdkMeterProvider::builder()
            .with_reader(exporter)
            .with_resource(crate::telemetry::resource());
        // The same instruments over OTLP too, when an endpoint is configured (every
        // `OTEL_METRIC_EXPORT_INTERVAL`, 60 s by default).
        let env = crate::telemetry::env;
        if config.metrics
            && let Some(otlp) = crate::telemetry::otlp(config, &env, "metrics")?
        {
            use crate::telemetry::{tonic, with_endpoint};
            use opentelemetry_otlp::MetricExporter;
            let exporter = otlp
                .build(
                    MetricExporter::builder(),
                    |b| Ok(with_endpoint(b.with_http(), &otlp).build()?),
                    |b| Ok(with_endpoint(tonic(b.with_tonic(), &otlp), &otlp).build()?),
                )
                .context("setting up the OTLP metric exporter")?;
            provider = provider
                .with_reader(opentelemetry_sdk::metrics::PeriodicReader::builder(exporter).build());
        }
        let provider = provider.build();
        let meter = provider.meter("toolgate");
        let metrics = if config.metrics {
            Metrics::new(&meter, config.tenant_attributes)
        } else {
            Metrics::default()
        };
        Ok(Self {
            provider,
            registry,
            meter,
            metrics,
            counts: Arc::default(),
            enabled: config.metrics,
        })
    }

    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    pub fn meter(&self) -> &Meter {
        &self.meter
    }

    /// The Prometheus text exposition of every instrument.
    pub fn render(&self) -> Result<String, prometheus::Error> {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out)?;
        Ok(String::from_utf8_lossy(&out).into_owned())
    }

    /// Registers the gauges observed from `state` (held weakly: the gauges never keep a
    /// stopped gateway alive).
    pub fn observe<S: Observed>(&self, state: Weak<S>) {
        if !self.enabled {
            return;
        }
        let gauge = |name, description, unit, read| {
            let gauge = self.meter.u64_observable_gauge(name);
            observed(gauge, &state, description, unit, read).build();
        };
        let counter = |name, description, unit, read| {
            let counter = self.meter.u64_observable_counter(name);
            observed(counter, &state, description, unit, read).build();
        };
        gauge(
            "toolgate.audit.queue.depth",
            "Audit records waiting to be committed",
            "{record}",
            S::audit_backlog,
        );
        gauge(
            "toolgate.calls.in_flight",
            "Tool calls running on this instance",
            "{call}",
            S::calls_in_flight,
        );
        gauge(
            "toolgate.instances",
            "Live instances sharing the store (and each rate limit)",
            "{instance}",
            S::instances,
        );
        gauge(
            "toolgate.sse.streams",
            "Open SSE streams (approval and run events, MCP session streams)",
            "{stream}",
            S::sse_streams,
        );
        gauge(
            "toolgate.mcp.sessions",
            "MCP sessions live in this instance's memory",
            "{session}",
            S::mcp_sessions,
        );
        gauge(
            "toolgate.store.tenant_operations",
            "Tenants' database operations holding a pooled connection (at most the pool less database.reserved_connections)",
            "{operation}",
            S::tenant_operations,
        );
        counter(
            "toolgate.store.tenant_operations.refused",
            "Tenants' database operations refused (503) because their share, or all tenants' places, were full",
            "{operation}",
            S::tenant_operations_refused,
        );
        gauge(
            "toolgate.store.write_turns.waiting",
            "Writes of this instance waiting for their turn at SQLite's write lock (0 on Postgres)",
            "{write}",
            |s| s.write_turns().waiting,
        );
        counter(
            "toolgate.store.write_turns",
            "Turns this instance's writes took at SQLite's write lock (0 on Postgres)",
            "{turn}",
            |s| s.write_turns().taken,
        );
        observed(
            self.meter.f64_observable_counter("toolgate.store.write_turns.wait"),
            &state,
            "Time this instance's writes spent waiting for their turn at SQLite's write lock, in all",
            "s",
            |s| s.write_turns().waited_secs,
        )
        .build();
        let counts = self.counts.clone();
        self.meter
            .i64_observable_gauge("toolgate.approvals.pending")
            .with_description("Approvals waiting for a decision, all tenants")
            .with_unit("{approval}")
            .with_callback(move |observer| {
                let counts = counts.lock().unwrap_or_else(|p| p.into_inner());
                observer.observe(counts.approvals_pending, &[]);
            })
            .build();
        let counts = self.counts.clone();
        self.meter
            .i64_observable_gauge("toolgate.runs")
            .with_description("Agent runs running or waiting for approval, all tenants")
            .with_unit("{run}")
            .with_callback(move |observer| {
                let counts = counts.lock().unwrap_or_else(|p| p.into_inner());
                // Both statuses always, 0 included: a series that appears only once a
                // run exists reads as "no data", not as none running.
                for status in LIVE_RUN_STATUSES.map(RunStatus::as_str) {
                    let n = counts
                        .runs
                        .iter()
                        .find(|(s, _)| s == status)
                        .map_or(0, |(_, n)| *n);
                    observer.observe(n, &[KeyValue::new("toolgate.run.status", status)]);
                }
            })
            .build();
    }

    /// Registers the gauge of open client connections and the counter of those closed at
    /// the cap (`http.max_connections`).
    pub fn observe_connections(&self, connections: Weak<crate::http_server::Connections>) {
        if !self.enabled {
            return;
        }
        observed(
            self.meter.u64_observable_gauge("toolgate.http.connections"),
            &connections,
            "Client connections open on the main listener (at most http.max_connections)",
            "{connection}",
            |c| c.open() as u64,
        )
        .build();
        observed(
            self.meter.u64_observable_counter("toolgate.http.connections.closed_at_cap"),
            &connections,
            "Connections asked to close, idle longest first, to make room for another at http.max_connections",
            "{connection}",
            crate::http_server::Connections::closed_at_cap,
        )
        .build();
    }

    /// Registers the gauge of request body bytes held and the counter of bodies refused
    /// for them (`http.max_body_bytes_in_flight`, and per tenant).
    pub fn observe_bodies(&self, bodies: Weak<crate::http_server::BodyBytes>) {
        if !self.enabled {
            return;
        }
        observed(
            self.meter.u64_observable_gauge("toolgate.http.request_body.held"),
            &bodies,
            "Request body bytes held until their requests are answered (at most http.max_body_bytes_in_flight)",
            "By",
            crate::http_server::BodyBytes::held,
        )
        .build();
        observed(
            self.meter.u64_observable_counter("toolgate.http.request_body.refused"),
            &bodies,
            "Request bodies refused because the instance, or their tenant, held as many body bytes as it may",
            "{request}",
            crate::http_server::BodyBytes::refused,
        )
        .build();
    }

    /// Registers the connection state of the operator's upstreams, by name.
    pub fn observe_upstreams(
        &self,
        upstreams: Vec<(
            String,
            tokio::sync::watch::Receiver<toolgate_mcp::upstream::Status>,
        )>,
    ) {
        self.meter
            .u64_observable_gauge("toolgate.upstream.connected")
            .with_description("Operator upstreams by name: 1 connected, 0 not (yet, or again)")
            .with_callback(move |observer| {
                for (name, status) in &upstreams {
                    let connected =
                        status.borrow().state == toolgate_mcp::upstream::State::Connected;
                    observer.observe(
                        u64::from(connected),
                        &[KeyValue::new("toolgate.upstream", name.clone())],
                    );
                }
            })
            .build();
    }

    /// Recounts the store-backed gauges every [`COUNTS_EVERY`] until `stop`.
    pub async fn count(self: Arc<Self>, store: toolgate_store::Store, stop: CancellationToken) {
        if !self.enabled {
            return;
        }
        let mut every = tokio::time::interval(COUNTS_EVERY);
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                _ = every.tick() => {}
            }
            match store.counts().await {
                Ok(counts) => *self.counts.lock().unwrap_or_else(|p| p.into_inner()) = counts,
                Err(err) => tracing::debug!(error = %err, "could not count approvals and runs"),
            }
        }
    }
}

/// The observed instrument `builder`, described, its value read from `state` when scraped
/// (nothing once the state is gone).
fn observed<'a, S: Send + Sync + 'static, I, T: 'static>(
    builder: AsyncInstrumentBuilder<'a, I, T>,
    state: &Weak<S>,
    description: &'static str,
    unit: &'static str,
    read: fn(&S) -> T,
) -> AsyncInstrumentBuilder<'a, I, T> {
    let weak = state.clone();
    builder
        .with_description(description)
        .with_unit(unit)
        .with_callback(move |observer: &dyn AsyncInstrument<T>| {
            if let Some(state) = weak.upgrade() {
                observer.observe(read(&state), &[]);
            }
        })
}

/// What the gauges read from a running gateway (the server's shared state implements
/// it, so this module names none of its parts).
pub trait Observed: Send + Sync + 'static {
    /// Audit records waiting to be committed.
    fn audit_backlog(&self) -> u64;
    /// Tool calls running on this instance.
    fn calls_in_flight(&self) -> u64;
    /// Live instances sharing the store.
    fn instances(&self) -> u64;
    /// Open SSE streams.
    fn sse_streams(&self) -> u64;
    /// MCP sessions live in this instance's memory.
    fn mcp_sessions(&self) -> u64;
    /// Tenants' database operations holding a connection now.
    fn tenant_operations(&self) -> u64;
    /// Tenants' database operations refused since start (their share, or all tenants'
    /// places, full).
    fn tenant_operations_refused(&self) -> u64;
    /// How this instance's writes took their turns at SQLite's write lock.
    fn write_turns(&self) -> toolgate_store::sqlite::WriteTurns;
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        let _ = self.provider.shutdown();
    }
}

/// The exposition as a response, in Prometheus text format 0.0.4 (404 with metrics off).
pub fn exposition(telemetry: &Telemetry) -> Response {
    if !telemetry.enabled {
        return ApiError::NoRoute.into_response();
    }
    match telemetry.render() {
        Ok(text) => (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            )],
            text,
        )
            .into_response(),
        Err(err) => ApiError::Internal(err.into()).into_response(),
    }
}

/// The `telemetry.metrics_listen` app: `GET /metrics`, nothing else, no credentials.
pub fn listener_app(telemetry: Arc<Telemetry>) -> axum::Router {
    axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let telemetry = telemetry.clone();
            async move { exposition(&telemetry) }
        }),
    )
}

//! # toolgate-server
//!
//! The `toolgate` binary's library: configuration, telemetry, the axum application with
//! the REST adapter, the OpenAPI document and docs page, and [`serve`]. Depends on every
//! other crate; nothing depends on it. `main.rs` only parses flags, loads [`Config`],
//! installs telemetry and awaits [`serve`].
//!
//! # Layout
//!
//! - [`config`]: layers defaults → file → `TOOLGATE_*` → flags into [`Config`]; each
//!   section is owned, and checked (`problems()`), by the crate it configures.
//! - [`auth`]: the [`auth::Caller`] extractor, made once per request from an API key or a
//!   JWT ([`jwt`]).
//! - [`bootstrap`]: the default tenant and admin key on first start.
//! - [`cli`]: the admin subcommands (`migrate`, `tenants`, `keys`, `audit verify`).
//! - [`request_id`]: request ids and the observe middleware (span, logging).
//! - [`rest`]: REST routes, one module per resource.
//! - [`error`]: [`error::ApiError`], problem+json errors for every HTTP edge.
//! - [`outcome`]: a successful call's outcome as REST shows (and keeps) it.
//! - [`mcp`]: the MCP front door at `/mcp` (rmcp Streamable HTTP) and its OAuth metadata.
//! - [`docs`]: `/openapi.json` and the offline `/docs` page.
//! - [`console`]: the operators' console at `/console` (plain modules, no build step).
//! - [`state`]: [`AppState`], what handlers share.
//! - [`telemetry`]: the `tracing` subscriber and OTLP export, with `[log]` and `[telemetry]`.
//! - [`streams`]: caps on open SSE streams; streams end when their credential does.
//! - [`http_server`]: the accept loop, with request read timeouts (slowloris).
//! - [`key_file`]: 32-byte keys from the configuration or a file made on first start.

pub mod auth;
pub mod bootstrap;
pub mod cli;
pub mod config;
pub mod console;
pub mod docs;
pub mod error;
pub mod http_server;
pub mod jwt;
pub mod key_file;
pub mod mcp;
pub mod metrics;
pub mod outcome;

pub mod request_id;
pub mod rest;
mod serve;
pub mod sources;
pub mod state;
pub mod streams;
pub mod telemetry;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, header};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolgate_core::audit::AuditSink;
use toolgate_core::backoff::Backoff;
use toolgate_core::{Executor, ExecutorLimits, Registry, TracingSink};
use toolgate_mcp::catalog::Catalog;
use toolgate_store::AuditWriter;
use toolgate_tools::{BuiltinOptions, Workspaces, builtin_tools};
use tower_http::cors::{AllowOrigin, CorsLayer};

pub use config::Config;
pub(crate) use serve::nodelay;
pub use serve::{bind, serve, serve_with, tuned};
pub use state::AppState;

use error::ApiError;

/// A built gateway: the state handlers share, and the audit writer task to drain on
/// shutdown.
pub struct Gateway {
    pub state: AppState,
    pub audit_writer: toolgate_store::AuditWriterTask,
}

/// Opens and migrates the store, records calls left unfinished by a previous run,
/// bootstraps an empty store, and builds the registry, audit writer and executor.
pub async fn build(config: &Config) -> anyhow::Result<Gateway> {
    build_with(config, None).await
}

/// [`build`], with the audit sink replaced when `audit` is given. For embedding and for
/// the benchmark's unaudited baseline (`bench/`); the `toolgate` binary never replaces it.
pub async fn build_with(
    config: &Config,
    audit: Option<Arc<dyn AuditSink>>,
) -> anyhow::Result<Gateway> {
    let store = cli::open_store(config).await?;
    let recovered = store
        .recover_unfinished()
        .await
        .context("recording unfinished calls")?;
    if recovered > 0 {
        tracing::warn!(
            calls = recovered,
            "recorded calls cut short by the last stop as interrupted"
        );
    }
    let key_file = config.admin_key_file();
    if let Some(secret) = bootstrap::bootstrap(&store, &key_file).await? {
        println!(
            "toolgate: first start: created tenant \"{}\" and its admin API key (shown once; also in {}, mode 0600):\n\n    {secret}\n",
            bootstrap::DEFAULT_TENANT,
            key_file.display()
        );
    }
    let root = config.workspace_root();
    let workspaces = Arc::new(
        Workspaces::new(&root)
            .with_context(|| format!("opening the workspace root {}", root.display()))?,
    );
    let registry = Arc::new(Registry::new());
    let options = BuiltinOptions {
        diagnostics: config.tools.diagnostics,
        commands: config.tools.execute_command.options(),
        fetch: config.tools.web_fetch.options(),
        search: config.tools.web_search.options(),
    };
    let builtins = builtin_tools(workspaces.clone(), &options)
        .map_err(|e| anyhow::anyhow!("setting up the built-in tools: {e}"))?;
    for tool in builtins {
        registry
            .register(tool)
            .context("registering the built-in tools")?;
    }
    let telemetry =
        Arc::new(metrics::Telemetry::new(&config.telemetry).context("setting up metrics")?);
    let (writer, audit_writer) =
        AuditWriter::spawn_measured(store.clone(), telemetry.metrics().clone())
            .context("starting the audit writer")?;
    let writer = writer.cutting_at(config.audit.max_argument_bytes);
    let limits = ExecutorLimits {
        max_output_chars: config.tools.max_output_chars,
    };
    let jwt = config
        .auth
        .jwt
        .clone()
        .map(|c| jwt::JwtVerifier::new(c, store.clone()));
    let authenticator = Arc::new(
        auth::Authenticator::new(store.clone(), jwt).with_sources(sources::Sources::new(
            config
                .http
                .trusted_proxies
                .iter()
                .filter_map(|p| sources::network(p))
                .collect(),
            config.http.unknown_keys_per_minute,
        )),
    );
    authenticator.watch_revocations();
    let audit = audit.unwrap_or_else(|| Arc::new(writer));
    let approvals = Arc::new(toolgate_core::approvals::StoredApprovals::new(
        store.clone(),
    ));
    let secret_names = toolgate_core::SecretNames::new(&config.tools.secret_names)
        .context("tools.secret_names")?;
    let admission = Arc::new(toolgate_core::limits::Admission::new(
        config.limits.admission(),
    ));
    let executor = Executor::new(Arc::new(TracingSink), audit.clone(), limits)
        .with_approvals(approvals.clone())
        .with_secret_names(secret_names)
        .with_arguments_digest(
            config
                .arguments_digest()
                .context("loading the audit signing key")?,
        )
        .with_admission(admission.clone())
        .with_metrics(telemetry.metrics().clone())
        .with_cache(toolgate_core::cache::ResultCache::new(config.cache.clone()));
    let mut providers = std::collections::HashMap::new();
    for (name, entry) in &config.providers {
        let provider = toolgate_agent::provider::build(&entry.to_provider())
            .map_err(|e| anyhow::anyhow!("provider {name}: {e}"))?;
        providers.insert(name.clone(), provider);
    }
    let runs = toolgate_agent::runs::Runs::new(
        store.clone(),
        registry.clone(),
        executor.clone(),
        providers,
    );
    runs.limit_per_tenant(config.limits.tenant_runs);
    runs.check_standing(authenticator.clone());
    let shutdown = CancellationToken::new();
    let catalog = Catalog::new();
    let pins = Arc::new(toolgate_mcp::pins::Pins::new(
        store.clone(),
        audit.clone(),
        executor.clone(),
        approvals.clone(),
    ));
    let vetting = toolgate_mcp::vetting::Vetting(Some(pins.clone()));
    let upstreams = if config.tenant_upstreams.enabled {
        let upstreams = toolgate_mcp::tenant_upstreams::TenantUpstreams::new(
            config.tenant_upstream_settings()?,
            store.clone(),
            registry.clone(),
            catalog.clone(),
            shutdown.clone(),
            vetting,
        )
        .context("setting up tenant upstreams")?;
        Some(Arc::new(upstreams))
    } else {
        None
    };
    let streams = Arc::new(streams::Streams::new(
        streams::StreamLimits {
            per_principal: config.http.max_streams_per_principal,
            per_tenant: config.http.max_streams_per_tenant,
        },
        authenticator.clone(),
        executor.metrics().clone(),
    ));
    let audit_keys = config.audit_keys()?;
    let decisions = Arc::new(toolgate_core::approvals::Decisions::new(
        approvals.clone(),
        audit.clone(),
        executor.clone(),
        toolgate_core::approvals::FollowUps {
            registry: registry.clone(),
            runs: runs.clone(),
            keep: Arc::new(outcome::kept),
            standing: authenticator.clone(),
        },
    ));
    let state = AppState::new(state::Shared {
        registry,
        catalog,
        executor,
        authenticator,
        workspaces,
        store,
        runs,
        approvals,
        decisions,
        audit,
        upstreams,
        shutdown,
        streams,
        admission,
        telemetry: telemetry.clone(),
        audit_keys,
        mcp_sessions: Arc::default(),
        pins,
        verifying: std::sync::Mutex::default(),
    });
    telemetry.observe(Arc::downgrade(&state.arc()));
    Ok(Gateway {
        state,
        audit_writer,
    })
}

/// [`build_with`], tried again (1 s, 2 s, … 10 s apart) while the store cannot be reached
/// — a database that is down when the gateway starts — with `listener` answering
/// meanwhile: `/healthz` 200, `/readyz` and everything else 503 with `Retry-After`.
/// `None` when `stop` came first.
async fn build_when_the_store_answers(
    config: &Config,
    audit: Option<Arc<dyn AuditSink>>,
    listener: &TcpListener,
    timeouts: http_server::ReadTimeouts,
    (connections, bodies): (&Arc<http_server::Connections>, &Arc<http_server::BodyBytes>),
    stop: &CancellationToken,
) -> anyhow::Result<Option<Gateway>> {
    let first = match build_with(config, audit.clone()).await {
        Ok(gateway) => return Ok(Some(gateway)),
        Err(err) if store_unreachable(&err) => err,
        Err(err) => return Err(err),
    };
    let addr = listener.local_addr().ok();
    tracing::error!(error = format!("{first:#}"), addr = ?addr, "the store cannot be reached; answering 503 and trying again");
    let built = CancellationToken::new();
    let served = (connections.clone(), bodies.clone());
    let waiting = http_server::serve(listener, not_ready_app(), timeouts, served.0, served.1, {
        let (built, stop) = (built.clone(), stop.clone());
        async move {
            tokio::select! {
                () = built.cancelled() => {}
                () = stop.cancelled() => {}
            }
        }
    });
    let building = async {
        let waits = Backoff::new(Duration::from_secs(1), Duration::from_secs(10));
        let mut attempt = 0;
        let result = loop {
            attempt += 1;
            tokio::select! {
                () = stop.cancelled() => break Ok(None),
                () = tokio::time::sleep(waits.delay(attempt)) => {}
            }
            match build_with(config, audit.clone()).await {
                Ok(gateway) => break Ok(Some(gateway)),
                Err(err) if store_unreachable(&err) => {
                    tracing::warn!(
                        error = format!("{err:#}"),
                        "the store still cannot be reached"
                    );
                }
                Err(err) => break Err(err),
            }
        };
        built.cancel();
        result
    };
    let ((), result) = tokio::join!(waiting, building);
    if matches!(result, Ok(Some(_))) {
        tracing::info!("the store answers; serving");
    }
    result
}

/// Whether start-up failed only because the store could not be reached.
fn store_unreachable(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<toolgate_store::StoreError>()
            .is_some_and(toolgate_store::StoreError::is_unavailable)
    })
}

/// What the listener answers while the store cannot be reached.
fn not_ready_app() -> Router {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    let waiting = || async {
        let mut response = (
            StatusCode::SERVICE_UNAVAILABLE,
            [(header::CONTENT_TYPE, "application/problem+json")],
            serde_json::json!({
                "type": "urn:toolgate:error:unavailable",
                "title": "Service unavailable",
                "status": 503,
                "detail": "the gateway is starting and cannot reach its store yet",
            })
            .to_string(),
        )
            .into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
        response
    };
    Router::new()
        .route(
            "/healthz",
            axum::routing::get(|| async { axum::Json(serde_json::json!({"status": "ok"})) }),
        )
        .route(
            "/readyz",
            axum::routing::get(|| async {
                (
                    StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(serde_json::json!({
                        "status": "not_ready",
                        "checks": [{"name": "store", "status": "cannot be reached yet"}],
                    })),
                )
            }),
        )
        .fallback(waiting)
}

/// Signs every tenant's chain head that moved, every `every`, until `stop`.
async fn sign_checkpoints(
    store: toolgate_store::Store,
    signer: toolgate_store::checkpoint::AuditSigner,
    every: Duration,
    stop: CancellationToken,
) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        match store.write_checkpoints(&signer).await {
            Ok(0) => {}
            Ok(signed) => {
                tracing::debug!(signed, key_id = %signer.key_id(), "audit checkpoints signed")
            }
            Err(err) => tracing::warn!(error = %err, "could not sign audit checkpoints"),
        }
    }
}

/// The OpenAPI document of the REST API, as served at `/openapi.json`.
pub fn openapi() -> utoipa::openapi::OpenApi {
    rest::router().split_for_parts().1
}

/// The rendered document: pretty JSON with a final newline, byte for byte what
/// `/openapi.json` serves and `openapi/openapi.json` holds.
pub fn openapi_json() -> String {
    let mut json = openapi()
        .to_pretty_json()
        .unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    json.push('\n');
    json
}

/// The whole HTTP application.
pub fn app(state: AppState, config: &Config) -> Router {
    let (mut api, document) = rest::router().split_for_parts();
    let mut document = document.to_pretty_json().unwrap_or_default();
    document.push('\n');
    // Only where reads are limited: the layer takes every REST request through one more
    // boxed future and a clone of the state.
    if config.limits.principal_reads_per_minute.is_some() {
        api = api.layer(axum::middleware::from_fn_with_state(
            state.clone(),
            rest::reads::limit,
        ));
    }
    let mut router = api
        .route("/metrics", axum::routing::get(scrape))
        .with_state(state.clone())
        .merge(docs::router(document))
        .merge(console::router(&config.console));
    if config.mcp.enabled {
        router = router.merge(mcp::router(state.clone(), config, state.shutdown.clone()));
    }
    let mut router = router
        .fallback(|| async { ApiError::NoRoute })
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .layer(DefaultBodyLimit::max(config.http.max_body_bytes))
        .layer(request_id::ObserveLayer);
    if let Some(cors) = cors(config) {
        router = router.layer(cors);
    }
    router
}

fn cors(config: &Config) -> Option<CorsLayer> {
    let origins = &config.http.cors_allowed_origins;
    if origins.is_empty() {
        return None;
    }
    let allow_origin = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow_origin)
            .allow_methods([
                Method::GET,
                Method::POST,
                Method::PUT,
                Method::DELETE,
                Method::OPTIONS,
            ])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                request_id::X_REQUEST_ID.clone(),
                HeaderName::from_static("last-event-id"),
                HeaderName::from_static("prefer"),
                HeaderName::from_static("mcp-session-id"),
                HeaderName::from_static("mcp-protocol-version"),
            ])
            .expose_headers([
                request_id::X_REQUEST_ID.clone(),
                header::RETRY_AFTER,
                header::WWW_AUTHENTICATE,
                header::LOCATION,
                HeaderName::from_static("mcp-session-id"),
            ])
            .max_age(Duration::from_secs(3600)),
    )
}

/// `GET /metrics` on the main listener: the operator's (`tenants:manage`).
async fn scrape(
    axum::extract::State(app): axum::extract::State<AppState>,
    caller: auth::Caller,
) -> Result<axum::response::Response, ApiError> {
    caller.require(auth::TENANTS_MANAGE)?;
    Ok(metrics::exposition(&app.telemetry))
}

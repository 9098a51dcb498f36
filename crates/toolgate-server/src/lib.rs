//! # toolgate-server
//!
//! The `toolgate` binary's library: configuration, telemetry, the axum application with
//! the REST adapter, the OpenAPI document and docs page, and [`serve`]. Depends on every
//! other crate; nothing depends on it. `main.rs` only parses flags, loads [`Config`],
//! installs telemetry and awaits [`serve`].
//!
//! # Layout
//!
//! - [`config`]: typed configuration, layered defaults → file → `TOOLGATE_*` → flags.
//! - [`auth`]: the [`auth::Caller`] extractor, made once per request.
//! - [`request_id`]: request ids and the observe middleware (span, logging).
//! - [`rest`]: REST routes, one module per resource; problem+json errors.
//! - [`docs`]: `/openapi.json` and the offline `/docs` page.
//! - [`state`]: [`AppState`], what handlers share.
//! - [`telemetry`]: the `tracing` subscriber.

pub mod auth;
pub mod config;
pub mod docs;
pub mod request_id;
pub mod rest;
pub mod state;
pub mod telemetry;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, HeaderValue, Method, header};
use axum::serve::ListenerExt;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use toolgate_core::{Executor, ExecutorLimits, Registry, TracingSink};
use toolgate_tools::{BuiltinOptions, Workspace, builtin_tools};
use tower_http::cors::{AllowOrigin, CorsLayer};

pub use config::Config;
pub use state::AppState;

use rest::error::ApiError;

/// Builds the shared state: workspace, registry with the built-in tools, executor.
pub fn build_state(config: &Config) -> anyhow::Result<AppState> {
    let root = config.workspace_root();
    let workspace = Arc::new(
        Workspace::open(&root)
            .with_context(|| format!("opening the workspace root {}", root.display()))?,
    );
    let registry = Arc::new(Registry::new());
    let options = BuiltinOptions {
        diagnostics: config.tools.diagnostics,
    };
    for tool in builtin_tools(workspace.clone(), &options) {
        registry
            .register(tool)
            .context("registering the built-in tools")?;
    }
    let limits = ExecutorLimits {
        max_output_chars: config.tools.max_output_chars,
    };
    Ok(AppState::new(state::Shared {
        registry,
        executor: Executor::new(
            Arc::new(TracingSink),
            Arc::new(toolgate_core::audit::NoAudit),
            limits,
        ),
        authenticator: Arc::new(auth::Authenticator::loopback_operator()),
        workspace,
    }))
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
    let (api, document) = rest::router().split_for_parts();
    let mut document = document.to_pretty_json().unwrap_or_default();
    document.push('\n');
    let mut router = api
        .with_state(state)
        .merge(docs::router(document.into()))
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
            .allow_methods([Method::GET, Method::POST, Method::DELETE, Method::OPTIONS])
            .allow_headers([
                header::AUTHORIZATION,
                header::CONTENT_TYPE,
                request_id::X_REQUEST_ID.clone(),
                HeaderName::from_static("last-event-id"),
                HeaderName::from_static("prefer"),
            ])
            .expose_headers([
                request_id::X_REQUEST_ID.clone(),
                header::RETRY_AFTER,
                header::WWW_AUTHENTICATE,
                header::LOCATION,
            ])
            .max_age(Duration::from_secs(3600)),
    )
}

/// Serves the gateway on `listener` until `shutdown` completes, then lets in-flight
/// requests finish for up to `http.shutdown_grace_secs` before returning.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let state = build_state(&config)?;
    let app = app(state, &config);
    let addr = listener
        .local_addr()
        .context("reading the listener's address")?;
    tracing::info!(%addr, "listening");
    let stopping = CancellationToken::new();
    let signal = stopping.clone();
    let server = axum::serve(tuned(listener), app).with_graceful_shutdown(async move {
        shutdown.await;
        tracing::info!("shutting down: no new connections, draining in-flight requests");
        signal.cancel();
    });
    let grace = Duration::from_secs(config.http.shutdown_grace_secs);
    tokio::select! {
        result = server => result.context("serving HTTP")?,
        () = async { stopping.cancelled().await; tokio::time::sleep(grace).await } => {
            tracing::warn!(grace_secs = grace.as_secs(), "in-flight requests still running after the grace period; stopping them");
        }
    }
    tracing::info!("stopped");
    Ok(())
}

/// The listener with `TCP_NODELAY` set on every accepted connection: without it small
/// replies wait for the peer's delayed ACK (tens of milliseconds each).
pub fn tuned(
    listener: TcpListener,
) -> impl axum::serve::Listener<Io = tokio::net::TcpStream, Addr = std::net::SocketAddr> {
    listener.tap_io(|tcp| {
        if let Err(err) = tcp.set_nodelay(true) {
            tracing::warn!(error = %err, "could not set TCP_NODELAY");
        }
    })
}

#[cfg(test)]
mod tests {
    use axum::serve::Listener;

    use super::*;

    #[tokio::test]
    async fn accepted_connections_have_tcp_nodelay() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut tuned = tuned(listener);
        let client = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (server_side, _) = tuned.accept().await;
        assert!(
            server_side.nodelay().expect("read option"),
            "TCP_NODELAY must be set"
        );
        drop(client);
    }
}

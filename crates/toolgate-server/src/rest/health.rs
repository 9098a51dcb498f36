//! Liveness and readiness.

use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::AppJson;
use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Health {
    /// `ok`, `ready` or `not_ready`.
    #[schema(example = "ok")]
    pub status: &'static str,
    /// Each dependency checked, with `ok` or what is wrong.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<Check>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct Check {
    pub name: &'static str,
    pub status: String,
}

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "health", security(()), responses((status = 200, description = "Alive", body = Health)))]
async fn healthz() -> AppJson<Health> {
    AppJson(Health {
        status: "ok",
        checks: Vec::new(),
    })
}

/// How long `/readyz` waits for the store.
const READY_PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// The gateway can serve calls: its dependencies answer.
#[utoipa::path(
    get,
    path = "/readyz",
    tag = "health",
    security(()),
    responses(
        (status = 200, description = "Ready", body = Health),
        (status = 503, description = "A dependency is not ready", body = Health),
    )
)]
async fn readyz(State(app): State<AppState>) -> (StatusCode, AppJson<Health>) {
    // The path, not an open handle: a handle on a deleted directory still answers.
    let workspace = match std::fs::metadata(app.workspaces.root()) {
        Ok(meta) if meta.is_dir() => "ok".to_owned(),
        Ok(_) => "workspace root is not a directory".to_owned(),
        Err(e) => format!("workspace root unavailable: {}", e.kind()),
    };
    // Reachable is not enough: the store must be able to commit an audit row now (a
    // locked audit table answers `select 1`). Bounded, so a hanging store is an answer.
    let probe = tokio::time::timeout(READY_PROBE_TIMEOUT, async {
        app.store.ping().await?;
        app.store.probe_write().await
    })
    .await;
    let store = match probe {
        Ok(Ok(())) => "ok".to_owned(),
        Ok(Err(err)) if err.is_unavailable() => {
            format!("{} store cannot commit now", app.store.backend())
        }
        Ok(Err(_)) => format!("{} store unreachable", app.store.backend()),
        Err(_) => format!("{} store did not answer in time", app.store.backend()),
    };
    let ready = workspace == "ok" && store == "ok";
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = Health {
        status: if ready { "ready" } else { "not_ready" },
        checks: vec![
            Check {
                name: "workspace",
                status: workspace,
            },
            Check {
                name: "store",
                status: store,
            },
        ],
    };
    (status, AppJson(body))
}
